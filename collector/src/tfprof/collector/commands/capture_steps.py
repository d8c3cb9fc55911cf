"""``capture --steps N -o FILE``: wait until every matched process has recorded its N steps.

A capture by steps has no end the collector knows: each process closes its window at
its own step boundary. The command reads the collector's data dir every second and
stops waiting once every stream the capture was sent to holds N step starts at or after
the capture's start (the hook's STEP records, or a replay's ``ProfilerStep#N`` ranges),
or once the capture's longest duration has passed; then it waits ``--flush-grace`` for
the last GPU records of those steps.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tfprof.proto import collector_pb2 as pb

if TYPE_CHECKING:
    from tfprof.collector.read.needs import Got, Query, Sweep

POLL_S = 1.0
# A step: the hook's STEP record, or a replay's ``ProfilerStep#N`` host range (a MARKER
# with a thread), counted when it starts at or after the capture's start.
STEPS_SINCE = (
    "SELECT process, count(*) FROM ("
    "SELECT process, s FROM {{st}} UNION ALL "
    "SELECT process, s FROM {{h_all}} WHERE kind = 6 AND thread <> 0 "
    "AND regexp_full_match(name, 'ProfilerStep#[0-9]+')"
    ") WHERE s >= {start} GROUP BY process"
)

# A process as a capture names it.
ProcessKey = tuple[str, str, str, int]  # job, run, host, pid


@dataclass(frozen=True, eq=False)
class _Steps:
    """The read engine's need: steps started since the capture began, per process."""

    query: Query

    def queries(self) -> Sequence[Query]:
        return (self.query,)

    def sweeps(self) -> Sequence[Sweep[Any]]:
        return ()

    def build(self, got: Got) -> list[tuple[Any, ...]]:
        return got.rows(self.query)


def steps_recorded(data_dir: str, capture: pb.Capture) -> dict[ProcessKey, int]:
    """Steps each process of ``capture`` has stored since the capture's start, read
    through the read engine (the data dir's lake and log tails, a process's records
    never loaded whole)."""
    from tfprof.collector.errors import NotFound
    from tfprof.collector.lake.reader import open_jobs
    from tfprof.collector.read import engine
    from tfprof.collector.read.lake_catalog import catalog
    from tfprof.collector.read.needs import Query
    from tfprof.collector.timeline.prepare import TimeWindow

    wanted = {(s.job, s.run_id, s.host, s.pid) for s in capture.streams}
    counts = dict.fromkeys(wanted, 0)
    jobs = []
    for name in sorted({s.job for s in capture.streams}):
        try:
            jobs += open_jobs([data_dir], [name]).jobs
        except NotFound:  # not stored yet: no step yet
            continue
    if not jobs:
        return counts
    cat = catalog(jobs, TimeWindow())
    need = _Steps(Query(STEPS_SINCE.format(start=int(capture.start_ns))))
    _, (rows,) = engine.read(cat, [need])
    for process, n in rows:
        stream = cat.streams[int(process)]
        key = (stream.job, stream.run_id, stream.host, stream.pid)
        if key in counts:
            counts[key] += int(n)
    return counts


def wait_for_steps(capture: pb.Capture, data_dir: str, grace_ns: int) -> None:
    """Return once every process of ``capture`` has its steps stored (or the capture's
    duration has passed), plus the flush grace."""
    want = capture.request.steps
    deadline = time.monotonic() + (capture.request.start_in_ns + capture.duration_ns) / 1e9
    print(f"tfprof-collector: waiting for {want} step(s) of {len(capture.streams)} stream(s)",
          file=sys.stderr)  # fmt: skip
    counts: dict[ProcessKey, int] = {}
    while time.monotonic() < deadline:
        counts = steps_recorded(data_dir, capture)
        if counts and min(counts.values()) >= want:
            break
        time.sleep(POLL_S)
    else:
        short = sum(1 for n in counts.values() if n < want)
        print(f"tfprof-collector: {short} stream(s) recorded fewer than {want} step(s) "
              "within the capture's duration", file=sys.stderr)  # fmt: skip
    time.sleep(grace_ns / 1e9)
