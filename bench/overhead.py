"""Overhead of tracing on a real TensorFlow job: median step time, traced vs untraced.

Runs examples/train_mnist_like.py alternately without and with

    tfprof-agent run --source none --host-metrics-interval 500 -o TMP/trace.json.gz -- ...

(embedded collector, host metrics sampled every 500 ms), for ``--rounds`` rounds; the
order inside a round alternates too, so slow drift of the machine cancels out. Each run
prints its median steady-state step time; this script prints every value, the median of
each side and the ratio traced / untraced (the issue's goal: <= 1.03). Wall times of the
whole process (start-up, TensorFlow import, trace writing) are shown beside them.

Run from the repository root:

    .venv/bin/python bench/overhead.py [--rounds 3] [--steps 200] [--source none]

Prints figures, asserts nothing; cleans up its temporary directory.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "train_mnist_like.py"
MEDIAN_STEP = re.compile(r"median step ([0-9.]+) ms")


def run_once(command: list[str], timeout: float) -> tuple[float, float]:
    """(median step ms, wall s) of one run; the process is killed on timeout."""
    t0 = time.monotonic()
    proc = subprocess.run(
        command, cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False
    )
    wall = time.monotonic() - t0
    match = MEDIAN_STEP.search(proc.stdout)
    if proc.returncode != 0 or match is None:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-10:])
        raise RuntimeError(f"run failed (exit {proc.returncode}): {' '.join(command)}\n{tail}")
    return float(match.group(1)), wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Median step time of examples/train_mnist_like.py with and without "
        "tfprof-agent run; prints the ratio traced / untraced."
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds (default: 3)")
    parser.add_argument("--steps", type=int, default=200, help="training steps (default: 200)")
    parser.add_argument(
        "--source",
        default="none",
        help="tracer source of the traced runs (default: none, as on a CPU-only host)",
    )
    parser.add_argument(
        "--host-metrics-interval",
        default="500",
        metavar="MS",
        help="host sampling period of the traced runs (default: 500)",
    )
    parser.add_argument(
        "--timeout", type=float, default=600, help="seconds allowed per run (default: 600)"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="TensorFlow op threads of the job (default: 1, leaving the other core to the "
        "launcher; with all cores TF's own scheduling noise dwarfs a few percent)",
    )
    args = parser.parse_args(argv)

    tmp = tempfile.mkdtemp(prefix="tfprof-bench-overhead-")
    try:
        job = [sys.executable, str(EXAMPLE), "--steps", str(args.steps), "--threads",
               str(args.threads)]  # fmt: skip
        traced = [
            sys.executable,
            "-m",
            "tfprof.agent.cli",
            "run",
            "--source",
            args.source,
            "--host-metrics-interval",
            args.host_metrics_interval,
            "-o",
            os.path.join(tmp, "trace.json.gz"),
            "--",
            *job,
        ]
        print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
        print(f"untraced: {' '.join(job)}")
        print(f"traced:   {' '.join(traced)}")
        results: dict[str, list[float]] = {"untraced": [], "traced": []}
        for r in range(args.rounds):
            order = ["untraced", "traced"] if r % 2 == 0 else ["traced", "untraced"]
            for kind in order:
                step_ms, wall = run_once(traced if kind == "traced" else job, args.timeout)
                results[kind].append(step_ms)
                print(
                    f"round {r + 1}  {kind:8s}  median step {step_ms:8.3f} ms"
                    f"  (process wall {wall:5.1f} s)",
                    flush=True,
                )
        untraced = statistics.median(results["untraced"])
        traced_ms = statistics.median(results["traced"])
        print(f"median of medians: untraced {untraced:.3f} ms, traced {traced_ms:.3f} ms")
        print(f"ratio traced / untraced: {traced_ms / untraced:.3f} (goal <= 1.03)")
        per_round = [t / u for t, u in zip(results["traced"], results["untraced"], strict=True)]
        print("per-round ratios: " + ", ".join(f"{x:.3f}" for x in per_round))
        # Each round pairs two neighbouring runs, so its ratio cancels the machine's drift;
        # the median of those is the figure least moved by one noisy run.
        print(f"median per-round ratio: {statistics.median(per_round):.3f} (goal <= 1.03)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
