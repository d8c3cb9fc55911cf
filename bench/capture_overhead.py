"""Overhead of an idle ``on-demand`` capture: what a traced job pays while no window is open.

Runs a job alternately plain and under

    tfprof-agent run --capture on-demand --source SOURCE -o TMP/trace.json.gz -- JOB

(embedded collector, host metrics every 500 ms) with no capture window ever opened, so
the hook is armed (sender thread, capture thread waiting in select, the source armed
with its activities off) and nothing is traced. The order inside a round alternates, so
slow drift of the machine cancels out. Two jobs:

- ``loop`` (default): a pure-Python CPU loop timed inside the job (the training thread's
  own time, start-up excluded); prints its median iteration block time.
- ``example``: examples/train_mnist_like.py (TensorFlow on CPU, ``--threads 1`` by
  default as in overhead.py), its median step time, and its whole process CPU time.

Prints every value, the median of each side and the ratio idle-traced / untraced (the
issue's goal: <= 1.01); also the ratio of the job's process CPU time (the loop job: over
the timed blocks; the example: the whole process), which counts the hook's own threads
and is far less disturbed by other load on a shared machine than wall time. With
``--source cupti`` on a GPU machine, CUPTI itself is armed (callbacks registered,
DEVICE and CONTEXT on, per-operation kinds off); without a GPU the default
``replay:demo`` arms the replay source, idle.

    .venv/bin/python bench/capture_overhead.py [--rounds 5] [--job loop|example]

Asserts nothing; cleans up its temporary directory.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "train_mnist_like.py"
MEDIAN = re.compile(r"median (?:step|block) ([0-9.]+) ms")

# Blocks of pure-Python work, each timed; the median block is the job's figure.
# process_time counts every thread of the process, the hook's included, and little of
# what other processes on a loaded machine do: the CPU figure is the steadier one.
LOOP_JOB = """
import statistics, sys, time
blocks = int(sys.argv[1])
wall, cpu = [], []
for _ in range(blocks):
    t0, c0 = time.perf_counter(), time.process_time()
    total = 0
    for i in range(200_000):
        total += i * i % 7
    wall.append((time.perf_counter() - t0) * 1e3)
    cpu.append((time.process_time() - c0) * 1e3)
skip = blocks // 10
print(f"median block {statistics.median(wall[skip:]):.3f} ms")
print(f"process cpu {sum(cpu[skip:]):.3f} ms")
"""
CPU = re.compile(r"process cpu ([0-9.]+) ms")

# The example job run as itself (runpy, same argv), then its whole process CPU time:
# start-up and TensorFlow's import included, the hook's threads too.
EXAMPLE_JOB = """
import runpy, sys, time
sys.argv = sys.argv[1:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except SystemExit as exc:
    if exc.code:
        raise
print(f"process cpu {time.process_time() * 1e3:.3f} ms")
"""


def run_once(command: list[str], timeout: float) -> tuple[float, float | None]:
    """The median block or step time (ms) a run prints, and the loop job's process CPU
    time over its timed blocks (ms; None for the example job)."""
    proc = subprocess.run(
        command, cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False
    )
    match = MEDIAN.search(proc.stdout)
    if proc.returncode != 0 or match is None:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-10:])
        raise RuntimeError(f"run failed (exit {proc.returncode}): {' '.join(command)}\n{tail}")
    cpu = CPU.search(proc.stdout)
    return float(match.group(1)), float(cpu.group(1)) if cpu else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Median block/step time of a job plain and under an idle on-demand "
        "capture (no window opened); prints the ratio traced / untraced.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--job", choices=("loop", "example"), default="loop", help="the job")
    parser.add_argument("--blocks", type=int, default=150, help="loop job: timed blocks")
    parser.add_argument("--steps", type=int, default=150, help="example job: training steps")
    parser.add_argument(
        "--threads", type=int, default=1, help="example job: TensorFlow op threads (0: all)"
    )
    parser.add_argument(
        "--source", default="replay:demo", help="tracer source armed idle (cupti on a GPU)"
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    args = parser.parse_args(argv)

    if args.job == "loop":
        job = [sys.executable, "-c", LOOP_JOB, str(args.blocks)]
    else:
        job = [sys.executable, "-c", EXAMPLE_JOB, str(EXAMPLE), "--steps", str(args.steps),
               "--threads", str(args.threads)]  # fmt: skip
    tmp = Path(tempfile.mkdtemp(prefix="tfprof-capture-bench-"))
    source = args.source
    if source == "replay:demo":
        source = f"replay:{REPO / 'agent/src/tfprof/agent/demo/simple_add.json.gz'}"
    traced = [
        sys.executable, "-m", "tfprof.agent.cli", "run", "--capture", "on-demand",
        "--source", source, "-o", str(tmp / "trace.json.gz"), "--", *job,
    ]  # fmt: skip
    plain: list[float] = []
    idle: list[float] = []
    cpu: dict[str, list[float]] = {"plain": [], "idle": []}
    try:
        for r in range(args.rounds):
            order = [("plain", job), ("idle", traced)]
            if r % 2:
                order.reverse()
            for label, command in order:
                value, cpu_ms = run_once(command, args.timeout)
                (plain if label == "plain" else idle).append(value)
                shown = ""
                if cpu_ms is not None:
                    cpu[label].append(cpu_ms)
                    shown = f"   process cpu {cpu_ms:10.1f} ms"
                print(f"round {r + 1} {label:5s} {value:9.3f} ms{shown}", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    ratios = [b / a for a, b in zip(plain, idle, strict=True)]
    print(f"job: {args.job}, source armed idle: {args.source}, rounds: {args.rounds}")
    print(f"untraced median      {statistics.median(plain):9.3f} ms")
    print(f"on-demand idle median {statistics.median(idle):8.3f} ms")
    print(
        f"ratio idle / untraced: {statistics.median(idle) / statistics.median(plain):.4f} "
        f"(per round: {', '.join(f'{x:.3f}' for x in ratios)}; goal <= 1.01)"
    )
    if cpu["plain"]:
        per_round = [b / a for a, b in zip(cpu["plain"], cpu["idle"], strict=True)]
        total = statistics.median(cpu["idle"]) / statistics.median(cpu["plain"])
        print(
            f"process CPU ratio idle / untraced: {total:.4f} (per round: "
            f"{', '.join(f'{x:.3f}' for x in per_round)}; the hook's threads included"
            + ("; whole process, start-up included)" if args.job == "example" else ")")
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
