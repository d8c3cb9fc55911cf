"""End-to-end throughput: one traced process replaying >= 1M records at max speed.

Starts a standalone collector (``tfprof.collector.cli serve`` on 127.0.0.1:0), then runs

    tfprof-agent run --collector ADDR --job bench --source replay:TRACE \\
        --replay-speed max --replay-repeat N --host-metrics-interval 0 -- python -c pass

with N chosen so that N * len(TRACE) >= --records. It times the agent run from the
outside, then loads the store and prints the records stored and dropped, records per
second (stored records / agent wall time), the CPU time of the job, the launcher and the
collector, and a timeline polled from outside (job process seen and exited, first and
last batch on the collector's disk, goodbye written, launcher exited).

Run from the repository root:

    .venv/bin/python bench/throughput.py [--records 1000000] [--trace PATH] [--runs 1]

Prints figures, asserts nothing; cleans up its temporary directory and the collector.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from tfprof.collector.store import Store
from tfprof.readers import load_trace

REPO = Path(__file__).resolve().parent.parent
DEFAULT_TRACE = "/work/shared/data/traces/tf-timeline-ikhlestov/GPU_timeline_03_merged_5_runs.json"
LISTENING = re.compile(r"listening on (\S+)")


def start_collector(data_dir: str, log_path: str) -> tuple[subprocess.Popen[str], str]:
    log = open(log_path, "w")  # noqa: SIM115 - closed with the process below
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tfprof.collector.cli",
            "--log-level",
            "WARNING",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            data_dir,
        ],
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        cwd=REPO,
    )
    log.close()
    if proc.stdout is None:  # pragma: no cover - stdout=PIPE always gives one
        raise RuntimeError("no stdout from the collector")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        match = LISTENING.search(line)
        if match:
            return proc, match.group(1)
    stop_process(proc)
    raise RuntimeError(f"collector did not report its address; see {log_path}")


def stop_process(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def cpu_seconds(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


class Timeline:
    """Watches the run from outside: the job process and the collector's files.

    Polls every ``interval`` seconds (so each time is +- that much): when the first and
    last bytes of the batch logs landed, when the job (the launcher's child) exited and
    when the collector wrote the stream's goodbye.
    """

    def __init__(self, data_dir: str, interval: float = 0.02) -> None:
        self.root = Path(data_dir) / "jobs"
        self.interval = interval
        self.t0 = 0.0
        self.first_batch = math.nan
        self.last_batch = math.nan
        self.job_seen = math.nan
        self.job_exit = math.nan
        self.goodbye = math.nan
        self.job_cpu = math.nan  # last reading before the job exited
        self._size = 0
        self._job: psutil.Process | None = None
        self._launcher: psutil.Process | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self, launcher_pid: int, t0: float) -> None:
        self.t0 = t0
        try:
            self._launcher = psutil.Process(launcher_pid)
        except psutil.Error:
            self._launcher = None
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            now = time.monotonic() - self.t0
            self._watch_job(now)
            size = sum(p.stat().st_size for p in self.root.glob("*/*/*/batches.log"))
            if size != self._size:
                if self._size == 0:
                    self.first_batch = now
                self._size = size
                self.last_batch = now
            if math.isnan(self.goodbye) and any(self.root.glob("*/*/*/goodbye.pb")):
                self.goodbye = now

    def _watch_job(self, now: float) -> None:
        if self._job is None and self._launcher is not None:
            try:
                children = self._launcher.children()
            except psutil.Error:
                children = []
            if children:
                self._job = children[0]
                self.job_seen = now
        elif self._job is not None and math.isnan(self.job_exit):
            try:
                with self._job.oneshot():
                    running = self._job.status() != psutil.STATUS_ZOMBIE
                    if running:
                        self.job_cpu = cpu_seconds(self._job)
            except psutil.Error:
                running = False
            if not running:
                self.job_exit = now


def one_run(args: argparse.Namespace, trace_len: int, repeat: int) -> None:
    expected = trace_len * repeat
    tmp = tempfile.mkdtemp(prefix="tfprof-bench-throughput-")
    collector: subprocess.Popen[str] | None = None
    try:
        data_dir = os.path.join(tmp, "data")
        collector, address = start_collector(data_dir, os.path.join(tmp, "collector.log"))
        collector_ps = psutil.Process(collector.pid)
        collector_cpu0 = cpu_seconds(collector_ps)
        command = [
            sys.executable,
            "-m",
            "tfprof.agent.cli",
            "run",
            "--collector",
            address,
            "--job",
            "bench",
            "--source",
            f"replay:{args.trace}",
            "--replay-speed",
            "max",
            "--replay-repeat",
            str(repeat),
            "--host-metrics-interval",
            "0",
            "--exit-timeout",
            "600",
            "--",
            sys.executable,
            "-c",
            "pass",
        ]
        timeline = Timeline(data_dir)
        before = os.times()
        t0 = time.monotonic()
        agent = subprocess.Popen(
            command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        timeline.start(agent.pid, t0)
        _, agent_stderr = agent.communicate()
        wall = time.monotonic() - t0
        after = os.times()
        timeline.stop()
        # The launcher and its job are our children: their CPU time lands in ours.
        agent_cpu = (after.children_user - before.children_user) + (
            after.children_system - before.children_system
        )
        collector_cpu = cpu_seconds(collector_ps) - collector_cpu0
        stop_process(collector)
        collector = None

        jobs = Store(data_dir).load_jobs(["bench"])
        stored = sum(job.num_records for job in jobs)
        dropped = sum(job.dropped.total for job in jobs)
        print(f"  agent exit code        {agent.returncode}")
        if agent_stderr.strip():
            for line in agent_stderr.strip().splitlines()[-5:]:
                print(f"  agent stderr           {line}")
        print(f"  records expected       {expected:,}")
        print(f"  records stored         {stored:,}")
        print(f"  records dropped        {dropped:,}")
        print(f"  agent wall time        {wall:.2f} s")
        print("  timeline, seconds after the launcher started (polled every 20 ms):")
        print(f"    job process seen     {timeline.job_seen:.2f}")
        print(f"    first batch on disk  {timeline.first_batch:.2f}")
        print(f"    last batch on disk   {timeline.last_batch:.2f}")
        print(f"    job process exited   {timeline.job_exit:.2f}")
        print(f"    goodbye on disk      {timeline.goodbye:.2f}")
        print(f"    launcher exited      {wall:.2f}")
        print(f"  throughput             {stored / wall:,.0f} records/s")
        job_cpu = timeline.job_cpu
        print(f"  CPU launcher + job     {agent_cpu:.2f} s ({agent_cpu / wall:.0%} of one core)")
        print(f"    of which the job     {job_cpu:.2f} s (hook + replay; last reading before exit)")
        print(f"    of which launcher    {agent_cpu - job_cpu:.2f} s (relay, protobuf, gRPC)")
        print(f"  CPU collector          {collector_cpu:.2f} s ({collector_cpu / wall:.0%})")
        print(
            f"  CPU per record         {(agent_cpu + collector_cpu) / max(stored, 1) * 1e6:.2f} us"
        )
    finally:
        if collector is not None:
            stop_process(collector)
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="End-to-end records/s: replay a real GPU trace at max speed through "
        "hook -> launcher -> gRPC -> a standalone collector, then check the store."
    )
    parser.add_argument(
        "--records",
        type=int,
        default=1_000_000,
        help="records to replay at least (default: 1,000,000)",
    )
    parser.add_argument(
        "--trace",
        default=DEFAULT_TRACE,
        help=f"recorded trace to replay (default: {DEFAULT_TRACE})",
    )
    parser.add_argument("--runs", type=int, default=1, help="repeat the whole run (default: 1)")
    args = parser.parse_args(argv)

    trace_len = len(load_trace(args.trace))
    repeat = max(1, math.ceil(args.records / trace_len))
    print(f"trace {args.trace}: {trace_len} records x {repeat} = {trace_len * repeat:,}")
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    for i in range(args.runs):
        print(f"run {i + 1}/{args.runs}")
        one_run(args, trace_len, repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
