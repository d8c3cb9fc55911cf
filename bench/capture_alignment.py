"""Capture alignment: how closely the processes of a capture start at the requested
instant, across two simulated hosts with different clocks, and how soon after the
``capture`` command the first record of the window is stored.

Sets up, with real processes: one ``tfprof-collector serve``; one node daemon per
simulated host, each with its own clock skew (``TFPROF_TEST_CLOCK_SKEW_NS``: the
daemon and the processes of that host see their clock off by it) and, when this runs as
root with ``unshare``, its own host name (a UTS namespace); ``--processes`` traced
processes spread over the hosts, started only with ``tfprof-agent env`` exports
(on-demand), each replaying a real GPU trace at speed 1, so records exist continuously
and replayed time is the wall clock. Then ``--captures`` times:
``tfprof-collector capture --all --duration D --start-in S``.

Per capture and process it prints, on the collector's clock (stored start + the
stream's shift):

- ``first``: first captured record - the requested start. It includes the trace's own
  gaps (no record starts there), up to the trace's widest gap;
- ``missed``: first captured record - the first record the process replayed at or
  after the requested start (the replay's timing is exact: t0 + loop * period +
  offset, solved from the captured records). 0 means the window opened exactly on
  time on that process; > 0 is what the capture path lost;
- ``after end``: the window's end - the last replayed record before it, minus the
  same for the last captured one (0: closed exactly on time);
- ``shift``: the clock shift its host measured (about minus its skew), and ``true``:
  when its window opened in true time relative to the requested start, which is the
  error of that measurement (the skew is known exactly here; on real hosts it is not,
  and this is the figure the clock estimate bounds by half a round trip).

And the spread (max - min) of each over all processes, and the
request-to-first-record latency: from starting the ``capture`` command to the first
byte of the window stored in any stream's log (polled every 5 ms), and per stream.

    .venv/bin/python bench/capture_alignment.py [--processes 8] [--captures 3]

Asserts nothing; cleans up its processes and temporary directory.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from tfprof.collector.jobdata import StreamData
from tfprof.collector.store.loader import load_stream
from tfprof.readers import load_trace

REPO = Path(__file__).resolve().parent.parent
TRACE = REPO / "tests/data/traces/tf-timeline-ikhlestov/GPU_timeline_03_merged_5_runs.json"
LOOP_GAP_NS = 1_000_000  # the replay source's gap between loops (sources/replay.py)
MS = 1e6
FIGURES = ("true", "first", "missed", "end", "stored")


def agent(*args: str) -> list[str]:
    return [sys.executable, "-m", "tfprof.agent.cli", *args]


def collector(*args: str) -> list[str]:
    return [sys.executable, "-m", "tfprof.collector.cli", *args]


def env_with(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TFPROF_")}
    env.update(extra)
    return env


def can_name_hosts() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "--uts", "sh", "-c", "hostname tfprof-probe"], capture_output=True, timeout=30
    )
    return probe.returncode == 0


def wait_line(proc: subprocess.Popen[str], marker: str, timeout: float = 120) -> str:
    """The first line of ``proc``'s stdout containing ``marker``."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if marker in line:
            return line
        if not line and proc.poll() is not None:
            break
    raise SystemExit(f"no {marker!r} from {proc.args!r}")


class Bench:
    def __init__(self, args: argparse.Namespace, tmp: Path) -> None:
        self.args = args
        self.tmp = tmp
        self.data = tmp / "data"
        self.sentinel = tmp / "stop"
        self.procs: list[subprocess.Popen[str]] = []  # the collector, then the daemons
        self.ranks: list[subprocess.Popen[bytes]] = []
        self.address = ""
        self.skews = [round(float(s) * 1e9) for s in args.skews.split(",")]

    def skew_of(self, rank: int) -> int:
        return self.skews[rank % len(self.skews)]

    def start_collector(self) -> None:
        proc = subprocess.Popen(
            collector("serve", "--listen", "127.0.0.1:0", "--data-dir", str(self.data),
                      "--log-level", "WARNING"),
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env_with(),
        )  # fmt: skip
        self.procs.append(proc)
        self.address = wait_line(proc, "listening on ").split()[-1]

    def start_host(self, index: int, skew_ns: int, named: bool) -> Path:
        """A node daemon for simulated host ``index``; its socket."""
        folder = self.tmp / f"h{index}"
        folder.mkdir()
        sock = folder / "agent.sock"
        cmd = agent("daemon", "--collector", self.address, "--socket", str(sock), "--spool-dir",
                    str(folder / "spool"), "--host-metrics-interval", "0")  # fmt: skip
        if named:
            script = f'hostname sim-host-{index} && exec "$@"'
            cmd = ["unshare", "--uts", "sh", "-c", script, "sh", *cmd]
        proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            env=env_with(TFPROF_TEST_CLOCK_SKEW_NS=str(skew_ns)),
        )  # fmt: skip
        self.procs.append(proc)
        assert proc.stderr is not None
        deadline = time.monotonic() + 120
        while "daemon listening on" not in proc.stderr.readline():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"daemon {index} did not start")
        return sock

    def start_rank(self, sock: Path, rank: int, skew_ns: int, named: bool, index: int) -> None:
        exports = subprocess.run(
            agent("env", "--socket", str(sock), "--job", "aligned", "--format", "json"),
            capture_output=True, text=True, timeout=60, check=True, env=env_with(),
        )  # fmt: skip
        env = env_with(**json.loads(exports.stdout))
        env.update(
            TFPROF_SOURCE=f"replay:{self.args.trace}", TFPROF_REPLAY_SPEED="1",
            TFPROF_REPLAY_REPEAT=str(self.args.repeat), TFPROF_EXIT_TIMEOUT="3",
            TFPROF_TEST_CLOCK_SKEW_NS=str(skew_ns),
            RANK=str(rank),
        )  # fmt: skip
        code = (
            "import os, time\n"
            f"while not os.path.exists({str(self.sentinel)!r}):\n"
            "    time.sleep(0.05)\n"
        )
        cmd = [sys.executable, "-c", code]
        if named:
            cmd = ["unshare", "--uts", "sh", "-c", f'hostname sim-host-{index} && exec "$@"',
                   "sh", *cmd]  # fmt: skip
        self.ranks.append(
            subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        )

    def logs(self) -> list[Path]:
        return sorted(self.data.glob("jobs/*/*/*/batches.log"))

    def wait_streams(self, n: int) -> None:
        deadline = time.monotonic() + 180
        while len(self.logs()) < n:
            if time.monotonic() > deadline:
                raise SystemExit(f"only {len(self.logs())} of {n} streams reached the collector")
            time.sleep(0.2)

    def stop(self) -> None:
        """Ranks first (through the sentinel), then the daemons, then the collector."""
        self.sentinel.touch()
        for rank in self.ranks:
            try:
                rank.wait(30)
            except subprocess.TimeoutExpired:
                rank.kill()
                rank.wait()
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class FirstBytes:
    """Polls every stream's log and notes when each first grows past its size now."""

    def __init__(self, logs: list[Path]) -> None:
        self.base = {p: p.stat().st_size for p in logs}
        self.first: dict[Path, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.wait(0.005):
            now = time.time_ns()
            for path, size in self.base.items():
                if path not in self.first and path.stat().st_size > size:
                    self.first[path] = now

    def stop(self) -> dict[Path, int]:
        self._stop.set()
        self._thread.join()
        return self.first


class ReplayTiming:
    """The replayed trace's record times: t0 + loop * period + offset on the host clock."""

    def __init__(self, path: Path) -> None:
        trace = load_trace(path)
        self.offsets = np.sort(np.asarray(trace.column("start_ns"), dtype=np.int64))
        self.period = int(trace.span_ns) + LOOP_GAP_NS
        self.widest_gap = int(
            max(np.diff(self.offsets).max(), self.period - (self.offsets[-1] - self.offsets[0]))
        )

    def phase(self, captured: np.ndarray) -> int | None:
        """t0 mod period of a process, from its captured records (None if ambiguous)."""
        sample = captured[:: max(1, len(captured) // 50)]
        allowed = set((self.offsets % self.period).tolist())
        for offset in np.unique(self.offsets):
            phase = int((captured[0] - offset) % self.period)
            if all(int((t - phase) % self.period) in allowed for t in sample):
                return phase
        return None

    def first_at_or_after(self, phase: int, t: int) -> int:
        k = (t - phase - int(self.offsets[-1])) // self.period
        while True:
            times = phase + k * self.period + self.offsets
            later = times[times >= t]
            if len(later):
                return int(later[0])
            k += 1

    def last_before(self, phase: int, t: int) -> int:
        k = (t - phase - int(self.offsets[0])) // self.period
        while True:
            times = phase + k * self.period + self.offsets
            earlier = times[times < t]
            if len(earlier):
                return int(earlier[-1])
            k -= 1


def capture_once(bench: Bench, timing: ReplayTiming, number: int) -> dict[str, list[float]]:
    args = bench.args
    before = {
        s.stream_dir: len(s.records["start_ns"]) for s in stored_streams(bench.data)
    }  # records stored before this window
    watch = FirstBytes(bench.logs())
    command_ns = time.time_ns()
    done = subprocess.run(
        collector("capture", "--collector", bench.address, "--all", "--duration", args.duration,
                  "--start-in", args.start_in),
        capture_output=True, text=True, timeout=120, env=env_with(),
    )  # fmt: skip
    replied_ns = time.time_ns()
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    capture_id = re.match(r"capture (\S+):", done.stdout)
    assert capture_id is not None, done.stdout
    lines = (bench.data / "captures.jsonl").read_text().splitlines()
    record = next(r for r in map(json.loads, lines) if r["capture_id"] == capture_id.group(1))
    start, end = record["start_ns"], record["start_ns"] + record["duration_ns"]
    time.sleep(max(0.0, (end - time.time_ns()) / 1e9) + args.grace)
    first_bytes = watch.stop()

    print(f"\ncapture {number}: {record['capture_id']}, {len(record['streams'])} stream(s)")
    print(
        f"  command -> collector's request {(record['requested_ns'] - command_ns) / MS:8.1f} ms"
        f"   command -> reply {(replied_ns - command_ns) / MS:8.1f} ms"
        f"   request -> window start {(start - record['requested_ns']) / MS:8.1f} ms"
    )
    print(
        f"  {'host':<12} {'rank':>4} {'shift ms':>10} {'true ms':>8} {'records':>7} "
        f"{'first ms':>9} {'missed ms':>9} {'after end ms':>12} {'stored at ms':>12}"
    )
    figures: dict[str, list[float]] = {n: [] for n in FIGURES}
    for stream in stored_streams(bench.data):
        new = np.sort(stream.records["start_ns"][before.get(stream.stream_dir, 0) :])
        shift = stream.record_shift_ns
        host_start, host_end = start - shift, end - shift
        new = new[(new >= host_start - 10**9) & (new < host_end + 10**9)]
        if not len(new):
            print(f"  {stream.host:<12} {stream.task:>4} {shift / MS:10.1f}  nothing captured")
            continue
        first = (int(new[0]) - host_start) / MS
        phase = timing.phase(new)
        missed = end_gap = float("nan")
        if phase is not None:
            missed = (int(new[0]) - timing.first_at_or_after(phase, host_start)) / MS
            end_gap = (timing.last_before(phase, host_end) - int(new[-1])) / MS
        # The host's clock is skewed by exactly its skew: the window opened at this
        # instant of true time, relative to the requested start.
        true_start = -(shift + bench.skew_of(int(stream.task))) / MS
        stored_ns = first_bytes.get(stream.log)
        stored_ms = (stored_ns - command_ns) / MS if stored_ns else float("nan")
        print(
            f"  {stream.host:<12} {stream.task:>4} {shift / MS:10.1f} {true_start:8.3f} "
            f"{len(new):7d} {first:9.3f} {missed:9.3f} {end_gap:12.3f} {stored_ms:12.1f}"
        )
        figures["true"].append(true_start)
        figures["first"].append(first)
        figures["missed"].append(missed)
        figures["end"].append(end_gap)
        figures["stored"].append(stored_ms)
    for name, values in figures.items():
        if name != "stored" and values:  # stored: printed below
            print(
                f"  spread of {name:<6} over {len(values)} processes: "
                f"{max(values) - min(values):.3f} ms (min {min(values):.3f}, "
                f"max {max(values):.3f})"
            )
    stored = sorted(v for v in figures["stored"] if v == v)
    if stored:
        window_at = (start - command_ns) / MS
        print(
            f"  first record stored {stored[0]:.1f} ms after the command "
            f"({stored[0] - window_at:.1f} ms after the window start at {window_at:.1f} ms); "
            f"per stream median {statistics.median(stored):.1f}, last {stored[-1]:.1f} ms"
        )
    return figures


class StoredStream:
    """One stored stream of the job, with the log file it grows in."""

    def __init__(self, stream: StreamData, log: Path) -> None:
        self.host = stream.host
        self.task = stream.task
        self.records = stream.records
        self.record_shift_ns = int(stream.record_shift_ns)
        self.log = log
        self.stream_dir = log.parent


def stored_streams(data: Path) -> list[StoredStream]:
    out = []
    for directory in sorted(data.glob("jobs/aligned/*/*")):
        stream = load_stream(directory) if (directory / "hello.pb").exists() else None
        if stream is not None:
            out.append(StoredStream(stream, directory / "batches.log"))
    return sorted(out, key=lambda s: (s.host, int(s.task)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=8, help="traced processes (default 8)")
    parser.add_argument(
        "--skews", default="2.5,-1.7", help="each host's clock skew in s (default 2.5,-1.7)"
    )
    parser.add_argument("--captures", type=int, default=3, help="captures in a row (default 3)")
    parser.add_argument("--duration", default="2s", help="each window's length (default 2s)")
    parser.add_argument("--start-in", default="1s", help="capture --start-in (default 1s)")
    parser.add_argument("--grace", type=float, default=2.0, help="s to wait after each window")
    parser.add_argument("--trace", type=Path, default=TRACE, help="the trace to replay")
    parser.add_argument("--repeat", type=int, default=1500, help="replay loops (outlast the run)")
    args = parser.parse_args(argv)
    named = can_name_hosts()
    timing = ReplayTiming(args.trace)
    tmp = Path(tempfile.mkdtemp(prefix="tfalign-", dir="/tmp"))
    bench = Bench(args, tmp)
    skews = bench.skews
    try:
        bench.start_collector()
        sockets = [bench.start_host(i, skew, named) for i, skew in enumerate(skews)]
        for rank in range(args.processes):
            host = rank % len(skews)
            bench.start_rank(sockets[host], rank, skews[host], named, host)
        bench.wait_streams(args.processes)
        print(
            f"{args.processes} processes on {len(skews)} simulated hosts (clock skews "
            f"{', '.join(f'{s / 1e9:+g} s' for s in skews)}; host names "
            f"{'from UTS namespaces' if named else 'all the same: not root or no unshare'}), "
            f"replaying {args.trace.name} at speed 1 ({len(timing.offsets)} records per "
            f"{timing.period / MS:.1f} ms loop, widest gap {timing.widest_gap / MS:.1f} ms)"
        )
        time.sleep(1.0)
        idle = sum(len(s.records["start_ns"]) for s in stored_streams(bench.data))
        print(f"records stored before any capture (on-demand, idle): {idle}")
        every: dict[str, list[float]] = {n: [] for n in FIGURES}
        for number in range(1, args.captures + 1):
            for name, values in capture_once(bench, timing, number).items():
                every[name].extend(values)
        print(f"\nover {args.captures} captures:")
        for name in FIGURES[:-1]:
            values = every[name]
            print(
                f"  {name:<6} min {min(values):8.3f}  median {statistics.median(values):8.3f}"
                f"  max {max(values):8.3f} ms"
            )
        stored = [v for v in every["stored"] if v == v]
        print(
            f"  stored after the command: min {min(stored):.1f}  median "
            f"{statistics.median(stored):.1f}  max {max(stored):.1f} ms (window start at "
            f"+{args.start_in})"
        )
    finally:
        bench.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
