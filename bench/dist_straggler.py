"""The straggler rule and the ranks view on replayed ranks, with real processes.

``--ranks`` processes, started by a shell ``--gap`` seconds apart, each declaring its rank
(``RANK``), replay a real multi-GPU Kineto trace under one ``tfprof-agent run`` into a
``tfprof-collector serve``: once with rank ``--stretch-rank`` replaying at
``--replay-stretch`` (``TFPROF_REPLAY_STRETCH``) and once with none stretched. For each
run it prints what ``advise --rule straggler --rule step-variance`` finds (job, rank, how
often it arrived last, in how many steps it was named, the others' wait) and the ranks
view's step time and overlap per rank, each command as a user types it.

    .venv/bin/python bench/dist_straggler.py [--trace FILE] [--ranks 8] [--stretch-rank 5]

Asserts nothing; cleans up its processes and temporary directory.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.replay_kit.ranks import env, ranks_script, serve

REPO = Path(__file__).resolve().parent.parent
TRACE = REPO / "tests/data/traces/kineto-hta-dist/nccl_allreduce_rank0_of2.json.gz"
COLLECTOR = [sys.executable, "-m", "tfprof.collector.cli"]


def replay(address: str, job: str, args: argparse.Namespace, stretch: float) -> None:
    script = ranks_script(args.ranks, args.gap, args.stretch_rank, stretch)
    done = subprocess.run(
        [sys.executable, "-m", "tfprof.agent.cli", "run", "--collector", address, "--job", job,
         "--source", f"replay:{args.trace}", "--replay-speed", "max", "--", "bash", "-c",
         script],
        env=env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    if done.returncode:
        raise SystemExit(f"{job}: {done.stderr}")


def cli(*argv: str) -> Any:
    done = subprocess.run([*COLLECTOR, *argv, "--format", "json"], env=env(),
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    if done.returncode:
        raise SystemExit(f"{' '.join(argv)}: {done.stderr}")
    return json.loads(done.stdout)


def report(data: Path, job: str, label: str) -> None:
    print(f"\n== {label}: tfprof-collector advise --data-dir DIR --job {job} "
          "--rule straggler --rule step-variance")  # fmt: skip
    found = cli("advise", "--data-dir", str(data), "--job", job, "--rule", "straggler",
                "--rule", "step-variance")["findings"]  # fmt: skip
    if not found:
        print("   no finding")
    for f in found:
        e = f["evidence"]
        if f["rule"] == "straggler":
            print(f"   straggler: rank {e['rank']} of {e['ranks']}, last at {e['arrived_last']} "
                  f"of {e['collectives']} collectives, named in {e['steps_named']} of "
                  f"{e['steps']} steps with collectives, others waited "
                  f"{e['others_waited_us'] / 1e3:,.1f} ms, max skew "
                  f"{e['max_skew_us'] / 1e3:,.1f} ms")  # fmt: skip
        else:
            print(f"   {f['rule']}: {f['title']}")
    print(f"   tfprof-collector summary --data-dir DIR --job {job} --view ranks")
    rows = cli("summary", "--data-dir", str(data), "--job", job, "--view", "ranks")["rows"]
    for r in rows:
        print(f"   rank {r['task']:>2}: step p50 {r['step_p50_us'] / 1e3:8.2f} ms, "
              f"overlap {r['overlap_pct']} %, compute {r['compute_pct']} %, "
              f"non-compute {r['non_compute_pct']} %, idle {r['idle_pct']} %")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trace", type=Path, default=TRACE)
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--stretch-rank", type=int, default=5)
    p.add_argument("--stretch", type=float, default=1.3)
    p.add_argument("--gap", type=float, default=0.3, help="seconds between rank starts")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tfprof-straggler-"))
    proc, address = serve(work / "data")
    try:
        print(f"{args.ranks} ranks replaying {args.trace.name}, started {args.gap} s apart")
        replay(address, "stretched", args, args.stretch)
        replay(address, "plain", args, 1.0)
    finally:
        proc.terminate()
        proc.wait(30)
    try:
        report(work / "data", "stretched", f"rank {args.stretch_rank} stretched {args.stretch}x")
        report(work / "data", "plain", "no rank stretched")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
