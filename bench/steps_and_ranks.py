"""What the recording side of steps, collectives and ranks stores, with real processes.

1. Replay as ranks: ``--ranks`` processes, started by a shell ``--gap`` seconds apart,
   each declaring its rank (``RANK``), replay a real multi-GPU trace under one
   ``tfprof-agent run`` into a ``tfprof-collector serve``; rank ``--stretch-rank``
   replays with ``TFPROF_REPLAY_STRETCH=--stretch``. Prints per rank its records, how far
   its records are from rank 0's (max |difference| in ns, on the collector's clock), and
   for the stretched rank how far they are from ``origin + stretch * (t0 - origin)``,
   and its span over rank 0's.
2. Zero-code step markers: a Keras ``fit`` (``examples/train_mnist_like.py --fit``) and,
   when torch is installed, a PyTorch CPU loop of two optimizers; prints batches or
   iterations run and STEP records stored.
3. Collective args: the trace imported; NCCL kernels, and those with Kineto's
   collective args stored in the lake's ``kernels`` columns, per collective.

    .venv/bin/python bench/steps_and_ranks.py [--ranks 8] [--stretch-rank 5] [--stretch 1.3]

Asserts nothing; cleans up its processes and temporary directory.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np

from tfprof.collector.store import Store
from tfprof.core import collectives
from tfprof.core.records import RecordKind

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.replay_kit.ranks import env, ranks_script, serve

REPO = Path(__file__).resolve().parent.parent
TRACE = REPO / "tests/data/traces/kineto-hta-dist/nccl_allreduce_rank0_of2.json.gz"
EXAMPLE = REPO / "examples/train_mnist_like.py"
TORCH_LOOP = """
import torch
a, b = torch.nn.Linear(8, 1), torch.nn.Linear(8, 1)
x = torch.randn(32, 8)
oa, ob = torch.optim.SGD(a.parameters(), lr=0.1), torch.optim.Adam(b.parameters())
for _ in range({n}):
    (a(x).sum() + b(x).sum()).backward()
    oa.step(); ob.step()
"""


def agent_run(address: str, job: str, source: str, *cmd: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tfprof.agent.cli", "run", "--collector", address, "--job", job,
         "--source", source, "--replay-speed", "max", "--", *cmd],
        env=env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    if done.returncode:
        raise SystemExit(f"{job}: {done.stderr}")


def ranks(address: str, data: Path, args: argparse.Namespace) -> None:
    script = ranks_script(args.ranks, args.gap, args.stretch_rank, args.stretch)
    agent_run(address, "ranks", f"replay:{TRACE}", "bash", "-c", script)
    (job,) = Store(data).load_jobs(["ranks"])
    by_task = {int(s.task): s for s in job.streams}
    zero = by_task[0]
    t0 = zero.records["start_ns"] + zero.record_shift_ns
    origin = int(t0.min())
    print(f"replay as ranks: {len(by_task)} ranks of {TRACE.name}, started {args.gap} s apart, "
          f"rank {args.stretch_rank} stretched {args.stretch}")  # fmt: skip
    print(f"{'rank':>4} {'records':>8} {'max |t - t(rank 0)| ns':>24} "
          f"{'max |t - stretched t(rank 0)| ns':>33} {'span / rank 0':>14}")  # fmt: skip
    for task, stream in sorted(by_task.items()):
        t = stream.records["start_ns"] + stream.record_shift_ns
        plain = int(np.abs(t - t0).max())
        want = origin + np.round((t0 - origin) * args.stretch).astype(np.int64)
        stretched = int(np.abs(np.sort(t) - np.sort(want)).max())
        span = (t.max() - origin) / (t0.max() - origin)
        print(f"{task:>4} {len(t):>8,} {plain:>24,} {stretched:>33,} {span:>14.4f}")


def markers(address: str, data: Path) -> None:
    agent_run(address, "keras-fit", "none", sys.executable, str(EXAMPLE), "--fit", "--steps", "16")
    rows = [("Keras fit (examples/train_mnist_like.py --fit --steps 16)", "keras-fit", 16)]
    if importlib.util.find_spec("torch") is not None:
        agent_run(address, "torch-loop", "none", sys.executable, "-c", TORCH_LOOP.format(n=10))
        rows.append(("PyTorch loop, 10 iterations, 2 optimizers", "torch-loop", 10))
    print("\nzero-code step markers")
    for label, name, ran in rows:
        (job,) = Store(data).load_jobs([name])
        r = job.streams[0].records
        numbers = sorted(r["external_id"][r["kind"] == RecordKind.STEP].tolist())
        print(f"  {label}: {ran} run, {len(numbers)} STEP records, numbers "
              f"{numbers[0]}-{numbers[-1]}")  # fmt: skip


def collective_args(data: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "tfprof.collector.cli", "import", str(TRACE), "--job", "of2",
         "--data-dir", str(data)], env=env(), check=True, capture_output=True,
    )  # fmt: skip
    (job,) = Store(data).load_jobs(["of2"])
    stream = job.streams[0]
    r = stream.records
    kernels = r["kind"] == RecordKind.KERNEL
    nccl = sum(1 for n in r["name"][kernels] if stream.strings[n].lower().startswith("nccl"))
    named = Counter(
        collectives.parse(stream.strings[i])["collective"] for i in r["collective"][kernels] if i
    )
    kinds = dict(sorted(named.items()))
    print(f"\ncollective args, {TRACE.name} imported: {nccl} NCCL kernels, "
          f"{sum(named.values())} with Kineto's collective args: {kinds}")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--stretch-rank", type=int, default=5)
    p.add_argument("--stretch", type=float, default=1.3)
    p.add_argument("--gap", type=float, default=0.3, help="seconds between rank starts")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tfprof-steps-"))
    proc, address = serve(work / "data")
    try:
        ranks(address, work / "data", args)
        markers(address, work / "data")
        collective_args(work / "imported")
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
