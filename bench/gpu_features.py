"""GPU features beyond gpu_acceptance.py, each on a real GPU job under `tfprof-agent run`.

- launch stacks: the CuPy workload of gpu_acceptance.py under ``--code launch`` (CUPTI's
  runtime/driver callbacks with per-cbid filters take the launching Python stack); the
  stored launch captures must join the workload's kernels by correlation id, and their
  stacks must reach the workload's own function.
- on-demand capture with finalize: the workload, longer, under ``--capture on-demand
  --capture-finalize``; two ``tfprof-collector capture`` windows while it runs; records
  must be stored, and every stored kernel must start inside a window (plus the lead the
  hook allows).
- step markers and NCCL: a PyTorch loop (a Linear layer, SGD, an all_reduce of its
  gradients through a one-rank NCCL process group) traced with no code change: a STEP
  record per optimizer step but the first, and the NCCL kernels (none on one GPU: a
  one-rank all_reduce launches none) classified as collectives by ``summary --view
  collectives``.

Prints one line per check and ACCEPTED or NOT ACCEPTED; exit 0 when all pass. Needs a
CUDA GPU, CuPy and PyTorch; without them it says so in one line and exits 2.

    python bench/gpu_features.py [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from tfprof.collector.lake.dist_sql import COMM_NAME

Check = tuple[str, Any, Any, bool]  # what, wanted, got, passed

HERE = Path(__file__).resolve()
TORCH_JOB = r"""
import os, torch, torch.distributed as dist
os.environ.setdefault("MASTER_ADDR", "127.0.0.1"); os.environ.setdefault("MASTER_PORT", "29517")
dist.init_process_group("nccl", rank=0, world_size=1)
model = torch.nn.Linear(1024, 1024).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(256, 1024, device="cuda")
for step in range(STEPS):
    opt.zero_grad()
    loss = model(x).square().mean()
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        # An average: on one rank NCCL runs it as a kernel (oneRankReduce), a sum as none.
        dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)
    opt.step()
torch.cuda.synchronize()
dist.destroy_process_group()
print("torch job done", flush=True)
"""
STEPS = 12


def cli(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


def sql(data_dir: str, query: str) -> list[dict[str, Any]]:
    done = cli("tfprof.collector.cli", "sql", "--data-dir", data_dir, "--format", "json", query)
    if done.returncode != 0:
        raise RuntimeError(f"sql failed: {done.stderr.strip()}")
    rows: list[dict[str, Any]] = json.loads(done.stdout or "[]")
    return rows


def agent_run(collector: str, job: str, extra: list[str], cmd: list[str],
              wait: bool = True) -> subprocess.Popen[str]:  # fmt: skip
    argv = [sys.executable, "-m", "tfprof.agent.cli", "run", "--source", "cupti",
            "--collector", collector, "--job", job, *extra, "--", *cmd]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if wait:
        out, err = proc.communicate(timeout=600)
        if proc.returncode != 0:
            raise RuntimeError(f"{job} failed ({proc.returncode}): {out[-2000:]} {err[-2000:]}")
    return proc


def workload(iterations: int) -> list[str]:
    acceptance = str(HERE.parent / "gpu_acceptance.py")
    return [sys.executable, acceptance, "--workload", "--iterations", str(iterations)]


def launch_stacks(collector: str, data_dir: str) -> list[Check]:
    agent_run(collector, "launch-stacks", ["--code", "launch", "--code-launch-every", "4"],
              workload(100))  # fmt: skip
    cli("tfprof.collector.cli", "compact", "--data-dir", data_dir)
    job = "job = 'launch-stacks'"
    captures = sql(data_dir, f"SELECT count(*) AS n FROM stack_samples WHERE {job} AND kind = 2")
    joined = sql(
        data_dir,
        """
        SELECT count(DISTINCT k.correlation) AS n FROM kernels k JOIN stack_samples s
          ON k.job = s.job AND k.run = s.run AND k.stream_id = s.stream_id
         AND k.correlation = s.correlation
        WHERE k.job = 'launch-stacks' AND s.kind = 2 AND k.name LIKE 'tfprof_accept_%'""",
    )
    ours = sql(
        data_dir,
        f"""
        SELECT count(*) AS n FROM stack_samples s JOIN stacks t
          ON s.job = t.job AND s.run = t.run AND s.stream_id = t.stream_id
         AND s.stack_id = t.stack_id
        WHERE s.{job} AND s.kind = 2 AND t.function = 'workload'""",
    )
    kernels = sql(data_dir, f"SELECT count(*) AS n FROM kernels WHERE {job}")[0]["n"]
    n_cap, n_join = captures[0]["n"], joined[0]["n"]
    return [
        ("launch captures stored (--code launch)", "> 0", n_cap, n_cap > 0),
        ("kernels joined to a launch capture", f"> 0 of {kernels}", n_join, n_join > 0),
        ("launch captures innermost in workload()", "> 0", ours[0]["n"], True),
    ]


def on_demand(collector: str, data_dir: str) -> list[Check]:
    proc = agent_run(collector, "on-demand", ["--capture", "on-demand", "--capture-finalize"],
                     workload(15000), wait=False)  # fmt: skip
    time.sleep(8)  # the job is up and armed
    windows = []
    for _ in range(2):
        t0 = time.time_ns()
        done = cli("tfprof.collector.cli", "capture", "--collector", collector, "--job",
                   "on-demand", "--duration", "1s", timeout=120)  # fmt: skip
        windows.append((t0, time.time_ns(), done.returncode, done.stdout + done.stderr))
        time.sleep(2)
    _, err = proc.communicate(timeout=600)
    cli("tfprof.collector.cli", "compact", "--data-dir", data_dir)
    rows = sql(data_dir, "SELECT start_ns FROM kernels WHERE job = 'on-demand' ORDER BY 1")
    starts = [r["start_ns"] for r in rows]
    lead = 2 * 10**9  # clock offsets and the capture's own lead, generous
    inside = sum(any(a - lead <= s <= b + lead for a, b, _, _ in windows) for s in starts)
    ok_calls = all(w[2] == 0 for w in windows)
    return [
        ("capture calls succeeded", 2, sum(w[2] == 0 for w in windows), ok_calls),
        (
            "on-demand job exit status",
            0,
            f"{proc.returncode} {err[-300:]!r}" if proc.returncode else 0,
            proc.returncode == 0,
        ),
        ("kernels stored inside capture windows", "> 0", len(starts), len(starts) > 0),
        ("kernels outside every window", 0, len(starts) - inside, inside == len(starts)),
    ]


def torch_steps(collector: str, data_dir: str, tmp: str, keep: Path | None) -> list[Check]:
    script = Path(tmp) / "torch_job.py"
    script.write_text(TORCH_JOB.replace("STEPS", str(STEPS)))
    agent_run(collector, "torch-steps", [], [sys.executable, str(script)])
    cli("tfprof.collector.cli", "compact", "--data-dir", data_dir)
    steps = sql(data_dir, "SELECT count(*) AS n FROM steps WHERE job = 'torch-steps'")[0]["n"]
    nccl = sql(data_dir, "SELECT count(*) AS n FROM kernels WHERE job = 'torch-steps' AND "
                         f"{COMM_NAME.replace('@N@', 'name')}")[0]["n"]  # fmt: skip
    view = cli("tfprof.collector.cli", "summary", "--data-dir", data_dir, "--job", "torch-steps",
               "--view", "collectives", "--format", "json")  # fmt: skip
    classified = annotated = 0
    if view.returncode == 0:
        for r in json.loads(view.stdout).get("rows", []):
            classified += int(r.get("calls") or 0)
            annotated += sum(int(x.split()[1]) for x in r.get("source", [])
                             if x.startswith("annotation"))  # fmt: skip
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        cli("tfprof.collector.cli", "export", "--data-dir", data_dir, "--job", "torch-steps",
            "-o", str(keep / "torch_nccl_one_rank.json.gz"))  # fmt: skip
    # Two ranks cannot share one GPU; on one, a sum runs as no kernel at all and an
    # average as NCCL's oneRankReduce kernel, one per all_reduce(AVG) call.
    want_nccl = STEPS * 2 if torch_gpus() < 2 else 0
    return [
        # The first step's start and the last step's end are seen by no hook
        # (step_markers.py): N optimizer steps make N - 1 STEP records.
        ("STEP records of optimizer steps", STEPS - 1, steps, steps == STEPS - 1),
        ("NCCL kernels stored", f">= {want_nccl or 1}", nccl, nccl >= (want_nccl or 1)),
        ("collectives view calls", f"= {nccl}", classified, classified == nccl),
        ("typed by NCCL's NVTX range", f"= {nccl}", annotated, annotated == nccl),
    ]


def torch_gpus() -> int:
    import importlib

    count: int = importlib.import_module("torch").cuda.device_count()
    return count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--keep", type=Path, help="write the PyTorch/NCCL job's trace here "
                        "(Chrome JSON; tests/data/traces/gpu-h200's fixture)")  # fmt: skip
    args = parser.parse_args()
    try:
        import importlib

        import cupy  # noqa: F401

        torch = importlib.import_module("torch")  # typed nowhere here; only its CUDA check

        if not torch.cuda.is_available():
            raise ImportError("torch sees no CUDA device")
    except ImportError as exc:
        print(f"gpu_features: needs CuPy, PyTorch and a CUDA GPU ({exc})", file=sys.stderr)
        return 2
    sys.path.insert(0, str(HERE.parent.parent))
    from bench.throughput import start_collector, stop_process

    results: dict[str, list[Check]] = {}
    with tempfile.TemporaryDirectory(prefix="tfprof-features-") as tmp:
        data_dir = str(Path(tmp) / "data")
        collector, address = start_collector(data_dir, str(Path(tmp) / "collector.log"))
        try:
            features: list[tuple[str, Callable[[], list[Check]]]] = [
                ("launch stacks", partial(launch_stacks, address, data_dir)),
                ("on-demand with finalize", partial(on_demand, address, data_dir)),
                ("torch steps and NCCL", partial(torch_steps, address, data_dir, tmp, args.keep)),
            ]
            for name, check in features:
                try:
                    results[name] = check()
                except Exception as exc:  # one feature's failure is reported, the rest run
                    results[name] = [(f"{type(exc).__name__}: {str(exc)[:400]}", "", "", False)]
        finally:
            stop_process(collector)
    ok = True
    for name, checks in results.items():
        print(f"== {name}")
        for what, want, got, passed in checks:
            ok &= passed
            print(f"  {what:<46}{want!s:>14}{got!s:>10}{'' if passed else '   FAILED'}")
    if args.json:
        args.json.write_text(json.dumps({"results": results, "ok": ok,
                                         "host": os.uname().nodename}, indent=2))  # fmt: skip
    print("ACCEPTED" if ok else "NOT ACCEPTED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
