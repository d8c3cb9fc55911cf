"""Chrome trace event JSON: opens in Perfetto UI and chrome://tracing.

Object form, ``{"displayTimeUnit": "ns", "otherData": {...}, "traceEvents": [...]}``:
``ts`` and ``dur`` are microseconds (fractional, nanosecond precision) relative to the
earliest event, as the format requires; ``displayTimeUnit`` only asks viewers to show
nanoseconds. The timeline's metadata goes under ``otherData``, the format's place for it
(chrome://tracing lists it under "Metadata", Perfetto ignores it).

Events are built a chunk at a time from numpy columns (one ``tolist()`` per column, a
list comprehension per kind, ``chrome_rows``) and serialised with orjson, so memory
stays bounded; a million slices take about two seconds, a tenth of what tf.timeline
needs (bench/).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import orjson

from tfprof.collector.export.chrome_rows import slice_events
from tfprof.collector.export.output import CHUNK_EVENTS, BinaryOutput
from tfprof.collector.timeline import CounterTrack, SliceTrack, Timeline
from tfprof.core.slice_args import CATEGORIES


@contextmanager
def _gc_paused() -> Iterator[None]:
    # Millions of short-lived event dicts would set off full collections that walk every
    # live object again and again (a fifth of the export time); nothing built here forms
    # cycles, so collection waits until the trace is written.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class ChromeReporter:
    """Renders a ``Timeline`` as Chrome trace event JSON."""

    format_name = "chrome"

    def __init__(self, timeline: Timeline, chunk_events: int = CHUNK_EVENTS) -> None:
        self.timeline = timeline
        self.chunk_events = max(1, chunk_events)
        self._names = np.array(timeline.names, dtype=object)

    def render(self, outfile: BinaryOutput) -> None:
        """Write the whole trace to a binary file object."""
        outfile.write(b'{"displayTimeUnit":"ns","otherData":')
        outfile.write(orjson.dumps(self.timeline.metadata))
        outfile.write(b',"traceEvents":[')
        first = True
        with _gc_paused():
            for chunk in self._chunks():
                if not chunk:
                    continue
                data = orjson.dumps(chunk)
                if not first:
                    outfile.write(b",")
                outfile.write(memoryview(data)[1:-1])  # the items without the list's brackets
                first = False
        outfile.write(b"]}\n")

    def _chunks(self) -> Iterator[list[dict[str, Any]]]:
        yield self._metadata_events()
        for track in self.timeline.slices:
            yield from self._slice_events(track)
        for counter in self.timeline.counters:
            yield from self._counter_events(counter)

    def _metadata_events(self) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        for proc in self.timeline.processes:
            events.append(
                {"ph": "M", "name": "process_name", "pid": proc.pid, "args": {"name": proc.name}}
            )
            events.append(
                {
                    "ph": "M",
                    "name": "process_sort_index",
                    "pid": proc.pid,
                    "args": {"sort_index": proc.sort_index},
                }
            )
        for track in self.timeline.slices:
            for tid, name in zip(track.thread_ids, track.thread_names, strict=True):
                events.append(
                    {
                        "ph": "M",
                        "name": "thread_name",
                        "pid": track.pid,
                        "tid": tid,
                        "args": {"name": name},
                    }
                )
                events.append(
                    {
                        "ph": "M",
                        "name": "thread_sort_index",
                        "pid": track.pid,
                        "tid": tid,
                        "args": {"sort_index": tid},
                    }
                )
        return events

    def _slice_events(self, track: SliceTrack) -> Iterator[list[dict[str, Any]]]:
        kind = track.kind
        tids = np.asarray(track.thread_ids, dtype=np.int64)[track.lane]
        known = np.zeros(kind.shape[0], dtype=bool)
        for value in CATEGORIES:
            mask = kind == value
            known |= mask
            yield from self._in_chunks(track, tids, mask, value)
        # Records of a kind this version does not know: shown plainly, never dropped.
        yield from self._in_chunks(track, tids, ~known, None)

    def _in_chunks(
        self, track: SliceTrack, tids: np.ndarray, mask: np.ndarray, kind: int | None
    ) -> Iterator[list[dict[str, Any]]]:
        every = bool(mask.all())  # e.g. a stream of kernels only: slices, not gathers
        count = mask.shape[0] if every else int(np.count_nonzero(mask))
        picked = None if every else np.flatnonzero(mask)
        for a in range(0, count, self.chunk_events):
            b = min(a + self.chunk_events, count)
            sel: slice | np.ndarray = slice(a, b) if picked is None else picked[a:b]
            yield slice_events(track, kind, sel, self._names, tids[sel].tolist())

    def _counter_events(self, counter: CounterTrack) -> Iterator[list[dict[str, Any]]]:
        name, pid, tid = counter.name, counter.pid, counter.tid
        for a in range(0, counter.time_ns.shape[0], self.chunk_events):
            b = a + self.chunk_events
            yield [
                {"ph": "C", "name": name, "pid": pid, "tid": tid, "ts": s, "args": {name: v}}
                for s, v in zip(
                    (counter.time_ns[a:b] / 1000.0).tolist(),
                    counter.values[a:b].tolist(),
                    strict=True,
                )
            ]


__all__ = ["CHUNK_EVENTS", "BinaryOutput", "ChromeReporter"]
