"""On a GPU: what `--code sample` and `--code launch` cost a real PyTorch training loop,
and how much of its GPU time they attribute to the job's own lines.

A small MLP trained with SGD on random data (a step: forward, backward, optimizer step,
then a synchronize so the step time is the GPU's too) runs untraced, under
``tfprof-agent run --code sample`` and under ``--code launch``, interleaved for
``--rounds`` rounds; each run prints its median step time. Then ``summary --view lines``
of each traced run's last round says how its GPU time was attributed (exactly through a
launch capture, or by the nearest sample) and how much of it lies under the job's own
file. Needs PyTorch and a CUDA GPU; without them it says so in one line and exits 2.

    python bench/gpu_code_cost.py [--rounds N] [--steps N] [--json OUT]
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

JOB = r"""
import json, sys, time, torch
steps = int(sys.argv[1])
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(2048, 4096), torch.nn.ReLU(),
    torch.nn.Linear(4096, 4096), torch.nn.ReLU(),
    torch.nn.Linear(4096, 1024),
).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x, y = torch.randn(512, 2048, device="cuda"), torch.randn(512, 1024, device="cuda")

def train_step():
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    torch.cuda.synchronize()

times = []
for _ in range(steps):
    t0 = time.perf_counter()
    train_step()
    times.append(time.perf_counter() - t0)
warm = times[len(times) // 10:]
print(json.dumps({"median_step_ms": 1e3 * sorted(warm)[len(warm) // 2]}), flush=True)
"""
MODES = {"untraced": None, "sample": ["--code", "sample"], "launch": ["--code", "launch"]}


def run(job: Path, steps: int, mode: list[str] | None, collector: str, name: str) -> float:
    cmd = [sys.executable, str(job), str(steps)]
    if mode is not None:
        cmd = [sys.executable, "-m", "tfprof.agent.cli", "run", "--source", "cupti",
               "--collector", collector, "--job", name, *mode, "--", *cmd]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"{name} failed ({done.returncode}): {done.stderr[-2000:]}")
    line = [ln for ln in done.stdout.splitlines() if ln.startswith("{")][-1]
    median: float = json.loads(line)["median_step_ms"]
    return median


def attribution(data_dir: str, name: str, job: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "tfprof.collector.cli", "summary", "--data-dir", data_dir,
         "--job", name, "--view", "lines", "--format", "json"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    if done.returncode != 0:
        return {"error": done.stderr.strip()[-500:]}
    view = json.loads(done.stdout)
    rows = view["rows"]
    total = sum(r["self_us"] for r in rows)
    mine = max((r["total_us"] for r in rows if job.name in r["code"]), default=0.0)
    return {"notes": view.get("notes", []), "gpu_us": total, "under_job_file_us": mine,
            "under_job_file_pct": 100.0 * mine / total if total else 0.0}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    try:
        if not importlib.import_module("torch").cuda.is_available():
            raise ImportError("torch sees no CUDA device")
    except ImportError as exc:
        print(f"gpu_code_cost: needs PyTorch and a CUDA GPU ({exc})", file=sys.stderr)
        return 2
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from bench.throughput import start_collector, stop_process

    medians: dict[str, list[float]] = {m: [] for m in MODES}
    found: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="tfprof-code-cost-") as tmp:
        job = Path(tmp) / "code_cost_job.py"
        job.write_text(JOB)
        data_dir = str(Path(tmp) / "data")
        collector, address = start_collector(data_dir, str(Path(tmp) / "collector.log"))
        try:
            for i in range(args.rounds):
                for mode, flags in MODES.items():
                    medians[mode].append(run(job, args.steps, flags, address, f"{mode}-{i}"))
        finally:
            stop_process(collector)
        subprocess.run([sys.executable, "-m", "tfprof.collector.cli", "compact", "--data-dir",
                        data_dir], capture_output=True, timeout=600)  # fmt: skip
        for mode in ("sample", "launch"):
            found[mode] = attribution(data_dir, f"{mode}-{args.rounds - 1}", job)
    base = statistics.median(medians["untraced"])
    print(f"median step time over {args.steps} steps, {args.rounds} interleaved rounds:")
    for mode, values in medians.items():
        med = statistics.median(values)
        runs = ", ".join(f"{v:.3f}" for v in values)
        print(f"  {mode:<9} {med:8.3f} ms  ratio {med / base:.3f}  (runs {runs})")
    for mode, got in found.items():
        print(f"--code {mode}, last round, summary --view lines:")
        for note in got.get("notes", [])[:2]:
            print(f"  {note}")
        if "error" in got:
            print(f"  error: {got['error']}")
        else:
            print(f"  GPU time under the job's own file: {got['under_job_file_pct']:.1f} % "
                  f"({got['under_job_file_us']:,.1f} of {got['gpu_us']:,.1f} us)")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps({"medians_ms": medians, "attribution": found}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
