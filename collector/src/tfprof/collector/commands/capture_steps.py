"""``capture --steps N -o FILE``: wait until every matched process has recorded its N steps.

A capture by steps has no end the collector knows: each process closes its window at
its own step boundary. The command reads the collector's data dir every second and
stops waiting once every stream the capture was sent to holds N step starts at or after
the capture's start (the hook's STEP records, or a replay's ``ProfilerStep#N`` ranges),
or once the capture's longest duration has passed; then it waits ``--flush-grace`` for
the last GPU records of those steps.
"""

from __future__ import annotations

import re
import sys
import time

import numpy as np

from tfprof.collector.jobdata import StreamData
from tfprof.collector.store import Store
from tfprof.core.records import RecordKind
from tfprof.proto import collector_pb2 as pb

POLL_S = 1.0
_PROFILER_STEP = re.compile(r"ProfilerStep#\d+")

# A process as a capture names it and as the store loads it.
ProcessKey = tuple[str, str, str, int]  # job, run, host, pid


def step_starts(stream: StreamData) -> np.ndarray:
    """The starts of the stream's steps on the collector's clock, sorted: its STEP
    records, and its host ranges named ``ProfilerStep#N``."""
    records = stream.records
    kinds = records["kind"]
    steps = kinds == RecordKind.STEP
    named = [i for i, text in enumerate(stream.strings) if _PROFILER_STEP.fullmatch(text)]
    if named:
        ranges = (kinds == RecordKind.MARKER) & (records["thread"] != 0)
        steps |= ranges & np.isin(records["name"], named)
    return np.sort(records["start_ns"][steps] + stream.record_shift_ns)


def steps_recorded(store: Store, capture: pb.Capture) -> dict[ProcessKey, int]:
    """Steps each process of ``capture`` has stored since the capture's start."""
    wanted = {(s.job, s.run_id, s.host, s.pid) for s in capture.streams}
    counts = dict.fromkeys(wanted, 0)
    for job in store.load_jobs(sorted({s.job for s in capture.streams}) or None):
        for stream in job.streams:
            key = (stream.job, stream.run_id, stream.host, stream.pid)
            if key in counts:
                starts = step_starts(stream)
                counts[key] += int((starts >= capture.start_ns).sum())
    return counts


def wait_for_steps(capture: pb.Capture, data_dir: str, grace_ns: int) -> None:
    """Return once every process of ``capture`` has its steps stored (or the capture's
    duration has passed), plus the flush grace."""
    want = capture.request.steps
    store = Store(data_dir, create=False)
    deadline = time.monotonic() + (capture.request.start_in_ns + capture.duration_ns) / 1e9
    print(f"tfprof-collector: waiting for {want} step(s) of {len(capture.streams)} stream(s)",
          file=sys.stderr)  # fmt: skip
    counts: dict[ProcessKey, int] = {}
    while time.monotonic() < deadline:
        counts = steps_recorded(store, capture)
        if counts and min(counts.values()) >= want:
            break
        time.sleep(POLL_S)
    else:
        short = sum(1 for n in counts.values() if n < want)
        print(f"tfprof-collector: {short} stream(s) recorded fewer than {want} step(s) "
              "within the capture's duration", file=sys.stderr)  # fmt: skip
    time.sleep(grace_ns / 1e9)
