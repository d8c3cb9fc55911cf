"""Cost of recording TensorFlow op names (``--tf-ops``) on a real TensorFlow job.

Runs examples/train_mnist_like.py in three ways, interleaved round by round (the order
rotates, so slow drift of the machine cancels out):

    untraced   python examples/train_mnist_like.py ...
    ops off    tfprof-agent run --source none --tf-ops off -o TMP/off.json -- python ...
    ops on     tfprof-agent run --source none --tf-ops on  -o TMP/on.json  -- python ...

Each run prints its median steady-state step time; this script prints every value, the
median per-round ratios (ops on / ops off is the cost of the op names alone, ops on /
untraced the whole tracer's) and, for the traced runs, the op records in the trace and
records per second of the job's wall time. Then it runs the job once more in this
process's child with the tracer alone (no launcher) and prints what the drains cost:
drains, records, the time no session was recording while one restarted (ops that end
then are not recorded) and the last drain at exit.

Run from the repository root:

    .venv/bin/python bench/tf_ops_overhead.py [--rounds 5] [--steps 300] [--threads 1]

Prints figures, asserts nothing; cleans up its temporary directory.
"""

from __future__ import annotations

import argparse
import json
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
MARKER = 6  # tfprof.core.records.RecordKind.MARKER

# The tracer alone, in a child: the job runs in-process with a sink that keeps counts.
TRACER_ALONE = """
import json, os, runpy, sys, time
from tfprof.agent.inprocess import tf_ops
class Sink:
    def __init__(self): self.names = {}
    def intern(self, s): return self.names.setdefault(s, len(self.names) + 1)
    def submit(self, table, wait=False): return True
    def add_devices(self, devices): pass
    def add_tracer_dropped(self, count): pass
    def warn(self, message): print("tfprof:", message, file=sys.stderr)
tf_ops.DRAIN_PERIOD_S = float(sys.argv[1])
tf_ops.install(Sink())
sys.argv = [sys.argv[2], *sys.argv[3:]]
t0 = time.monotonic()
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except SystemExit:
    pass
ran = time.monotonic() - t0
tracer = tf_ops._tracer
t1 = time.monotonic()
tracer.stop(time.monotonic() + 60)
print(json.dumps({"ran_s": ran, "last_drain_s": time.monotonic() - t1,
    "drains": tracer.drains, "records": tracer.records, "gap_s": tracer.gap_ns / 1e9}))
"""


def run_once(command: list[str], timeout: float) -> tuple[float, float]:
    """(median step ms, wall s) of one run."""
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


def op_records(trace: str) -> int:
    with open(trace, encoding="utf-8") as f:
        events = json.load(f)["traceEvents"]
    return sum(1 for e in events if e.get("ph") == "X" and e.get("args", {}).get("kind") == MARKER)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Median step time of examples/train_mnist_like.py untraced, traced with "
        "--tf-ops off and with --tf-ops on; prints the ratios and op records per second."
    )
    parser.add_argument(
        "--rounds", type=int, default=5, help="rounds (default: 5; 0: the tracer-alone run only)"
    )
    parser.add_argument("--steps", type=int, default=300, help="training steps (default: 300)")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="TensorFlow op threads of the job (default: 1, leaving a core to the launcher)",
    )
    parser.add_argument(
        "--drain-period",
        type=float,
        default=5.0,
        metavar="S",
        help="drain period of the tracer-alone run (default: 5.0, the shipped one)",
    )
    parser.add_argument(
        "--timeout", type=float, default=600, help="seconds allowed per run (default: 600)"
    )
    args = parser.parse_args(argv)

    tmp = tempfile.mkdtemp(prefix="tfprof-bench-tf-ops-")
    try:
        job = [sys.executable, str(EXAMPLE), "--steps", str(args.steps), "--threads",
               str(args.threads)]  # fmt: skip

        def traced(switch: str) -> list[str]:
            output = os.path.join(tmp, f"{switch}.json")
            return [sys.executable, "-m", "tfprof.agent.cli", "run", "--source", "none",
                    "--tf-ops", switch, "-o", output, "--", *job]  # fmt: skip

        commands = {"untraced": job, "ops off": traced("off"), "ops on": traced("on")}
        print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
        for kind, command in commands.items():
            print(f"{kind:9s} {' '.join(command)}")
        steps: dict[str, list[float]] = {kind: [] for kind in commands}
        rates: list[float] = []
        kinds = list(commands)
        for r in range(args.rounds if args.rounds > 0 else 0):
            order = kinds[r % 3 :] + kinds[: r % 3]
            for kind in order:
                step_ms, wall = run_once(commands[kind], args.timeout)
                steps[kind].append(step_ms)
                extra = ""
                if kind == "ops on":
                    n = op_records(os.path.join(tmp, "on.json"))
                    rates.append(n / wall)
                    extra = f"  {n:,} op records, {n / wall:,.0f}/s of wall"
                print(
                    f"round {r + 1}  {kind:9s} median step {step_ms:8.3f} ms"
                    f"  (process wall {wall:5.1f} s){extra}",
                    flush=True,
                )
        for kind in kinds if args.rounds > 0 else ():
            print(f"median of medians {kind:9s} {statistics.median(steps[kind]):8.3f} ms")
        pairs = (("ops on", "ops off"), ("ops on", "untraced"), ("ops off", "untraced"))
        for num, den in pairs if args.rounds > 0 else ():
            ratios = [a / b for a, b in zip(steps[num], steps[den], strict=True)]
            print(
                f"median per-round ratio {num} / {den}: {statistics.median(ratios):.3f}"
                f"  ({', '.join(f'{x:.3f}' for x in ratios)})"
            )
        if rates:
            print(f"op records per second of wall (ops on): median {statistics.median(rates):,.0f}")

        alone = subprocess.run(
            [sys.executable, "-c", TRACER_ALONE, str(args.drain_period), *job[1:]],
            cwd=REPO, capture_output=True, text=True, timeout=args.timeout, check=False,
        )  # fmt: skip
        lines = [line for line in alone.stdout.splitlines() if line.startswith("{")]
        if alone.returncode != 0 or not lines:
            raise RuntimeError(f"tracer-alone run failed: {alone.stderr[-2000:]}")
        fig = json.loads(lines[-1])
        step = MEDIAN_STEP.search(alone.stdout)
        print(
            f"tracer alone (drain every {args.drain_period:g} s): median step "
            f"{step.group(1) if step else '?'} ms, job ran {fig['ran_s']:.2f} s, "
            f"{fig['drains']} drains, {fig['records']:,} op records "
            f"({fig['records'] / fig['ran_s']:,.0f}/s), no session recording for "
            f"{fig['gap_s'] * 1e3:.0f} ms ({fig['gap_s'] / fig['ran_s']:.1%} of the run), "
            f"last drain at exit {fig['last_drain_s'] * 1e3:.0f} ms"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
