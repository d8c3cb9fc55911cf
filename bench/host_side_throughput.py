"""End-to-end records/s with the CUPTI host side on: genuine cupti-python record buffers
through the CUPTI source's buffer callback, the hook, the launcher and gRPC into a
standalone collector, with and without API/marker/memory records.

There is no GPU here, so CUPTI cannot fill buffers. Instead the traced job (a Python
process started by ``tfprof-agent run --source none --collector ADDR``) binds a
``CuptiSource`` to its own hook and hands its buffer callback N records in buffers of
``--buffer`` genuine cupti-python objects (built by bench/hook_cost.py), exactly as
CUPTI's thread would. Two mixes, each run ``--runs`` times alternately:

- ``gpu only``: kernels and copies 3:1 (what tracing recorded before the host side);
- ``host mix``: per op an NVTX range (2 marker records), its launch call and its kernel,
  a copy now and then (bench/hook_cost.py's HOST_MIX).

Prints, per mix, the rows stored (an NVTX range, 2 CUPTI records, is one row) and
dropped, the launcher's wall time, rows/s (stored / wall) and the CPU per row of
launcher + job and collector.

    .venv/bin/python bench/host_side_throughput.py [--records 400000] [--runs 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from tfprof.collector.store import Store

# The repository root, so that the bench scripts import each other as ``bench.*``.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.throughput import cpu_seconds, start_collector, stop_process

REPO = Path(__file__).resolve().parent.parent

JOB = """
import sys
sys.path.insert(0, sys.argv[1])
from bench import hook_cost
from tfprof.agent.inprocess import hook
from tfprof.agent.inprocess.sources.cupti import CuptiSource

mix, total, size = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
kinds = (["kernel", "kernel", "kernel", "memcpy"] if mix == "gpu" else list(hook_cost.HOST_MIX))
buffer = [kinds[i % len(kinds)] for i in range(size)]
records, keep = hook_cost.packed_records(buffer, chunked=True)
source = CuptiSource()
source.bind(hook._hook)  # the hook of this process, as CuptiSource.start does
for _ in range(total // size):
    source.buffer_completed(records)
"""


def one_run(mix: str, args: argparse.Namespace) -> dict[str, float]:
    tmp = tempfile.mkdtemp(prefix="tfprof-bench-host-")
    collector: subprocess.Popen[str] | None = None
    try:
        data_dir = os.path.join(tmp, "data")
        collector, address = start_collector(data_dir, os.path.join(tmp, "collector.log"))
        collector_ps = psutil.Process(collector.pid)
        collector_cpu0 = cpu_seconds(collector_ps)
        command = [
            sys.executable, "-m", "tfprof.agent.cli", "run", "--collector", address,
            "--job", "bench", "--source", "none", "--host-metrics-interval", "0",
            "--exit-timeout", "600", "--", sys.executable, "-c", JOB,
            str(REPO), mix, str(args.records), str(args.buffer),
        ]  # fmt: skip
        env = {**os.environ, "TFPROF_QUEUE_BYTES": str(1 << 30)}
        before = os.times()
        t0 = time.monotonic()
        done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
        wall = time.monotonic() - t0
        after = os.times()
        if done.returncode != 0:
            raise SystemExit(f"run failed ({done.returncode}): {done.stderr[-2000:]}")
        agent_cpu = (after.children_user - before.children_user) + (
            after.children_system - before.children_system
        )
        collector_cpu = cpu_seconds(collector_ps) - collector_cpu0
        stop_process(collector)
        collector = None
        jobs = Store(data_dir).load_jobs(["bench"])
        stored = sum(job.num_records for job in jobs)
        dropped = sum(job.dropped.total for job in jobs)
        return {
            "stored": stored,
            "dropped": dropped,
            "wall": wall,
            "agent_cpu": agent_cpu,
            "collector_cpu": collector_cpu,
        }
    finally:
        if collector is not None:
            stop_process(collector)
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=400_000, help="records per run")
    parser.add_argument("--buffer", type=int, default=4_000, help="records per CUPTI buffer")
    parser.add_argument("--runs", type=int, default=2, help="runs per mix, alternating")
    args = parser.parse_args(argv)
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    print(f"{args.records:,} records per run in buffers of {args.buffer:,}")
    header = f"{'mix':<10}{'stored':>10}{'dropped':>9}{'wall s':>8}{'records/s':>12}"
    print(header + f"{'agent us/rec':>14}{'collector us/rec':>18}")
    for _ in range(args.runs):
        for mix in ("gpu", "host"):
            r = one_run(mix, args)
            stored = max(r["stored"], 1)
            print(
                f"{'gpu only' if mix == 'gpu' else 'host mix':<10}{r['stored']:>10,.0f}"
                f"{r['dropped']:>9,.0f}{r['wall']:>8.2f}{r['stored'] / r['wall']:>12,.0f}"
                f"{r['agent_cpu'] / stored * 1e6:>14.2f}{r['collector_cpu'] / stored * 1e6:>18.2f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
