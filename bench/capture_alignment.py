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
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.capture_kit.cluster import Bench, can_name_hosts, collector, env_with
from bench.capture_kit.readings import FirstBytes, ReplayTiming, stored_streams

REPO = Path(__file__).resolve().parent.parent
TRACE = REPO / "tests/data/traces/tf-timeline-ikhlestov/GPU_timeline_03_merged_5_runs.json"
MS = 1e6
FIGURES = ("true", "first", "missed", "end", "stored")


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
