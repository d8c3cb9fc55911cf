"""Where a timeline's time 0 lies, found before any stream is loaded whole.

A merged timeline is written relative to its earliest exported event (``origin``):
the earliest start of a record kept by the window, or of a host sample inside it.
Parts of a timeline are written one task at a time, so the origin must be known
before the first task is merged: this pass reads only times (for a stored stream,
``StoredStream.record_times``: start and duration columns, a table at a time).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Protocol, runtime_checkable

import numpy as np

from tfprof.collector.jobdata import JobData, StreamData
from tfprof.collector.timeline.prepare import TimeWindow


@runtime_checkable
class StoredStream(Protocol):
    """A stream whose records are read only inside ``loaded`` (``lake.lake_stream.LakeStream``)."""

    def loaded(
        self, host: bool = True, columns: Sequence[str] = ...
    ) -> AbstractContextManager[None]: ...

    def record_times(self) -> Iterator[tuple[np.ndarray, np.ndarray]]: ...

    def host_sample_times(self) -> np.ndarray: ...


def _record_times(stream: StreamData) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(start on the collector clock, duration clamped at 0), a piece at a time."""
    if isinstance(stream, StoredStream):
        pieces = stream.record_times()
    else:
        pieces = iter([(stream.records["start_ns"], stream.records["duration_ns"])])
    for start, duration in pieces:
        if start.shape[0]:
            yield start + np.int64(stream.record_shift_ns), np.maximum(duration, 0)


def _host_times(stream: StreamData) -> np.ndarray:
    if isinstance(stream, StoredStream):
        times = stream.host_sample_times()
    else:
        times = stream.host_samples["time_ns"]
    shifted: np.ndarray = np.asarray(times, dtype=np.int64) + np.int64(stream.host_shift_ns)
    return shifted


def first_record_ns(jobs: Sequence[JobData]) -> int | None:
    """The earliest record start on the collector clock (what ``+OFFSET`` times count from)."""
    firsts = [
        int(start.min()) for job in jobs for s in job.streams for start, _ in _record_times(s)
    ]
    return min(firsts) if firsts else None


def origin_ns(jobs: Sequence[JobData], window: TimeWindow) -> int:
    """The earliest start of a record the window keeps (whole: it may start before the
    window) or of a host sample inside it; 0 when there is none."""
    firsts: list[int] = []
    for job in jobs:
        for stream in job.streams:
            for start, duration in _record_times(stream):
                kept = window.overlapping(start, start + duration)
                picked = start if kept is None else start[kept]
                if picked.shape[0]:
                    firsts.append(int(picked.min()))
            host = _host_times(stream)
            host = host[window.holds(host)]
            if host.shape[0]:
                firsts.append(int(host.min()))
    return min(firsts, default=0)
