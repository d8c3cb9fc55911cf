"""Chrome trace event JSON: opens in Perfetto UI and chrome://tracing.

Object form, ``{"displayTimeUnit": "ns", "metadata": {"tool": ...}, "traceEvents": [...],
"otherData": {...}}``:
``ts`` and ``dur`` are microseconds (fractional, nanosecond precision) relative to the
earliest event, as the format requires; ``displayTimeUnit`` only asks viewers to show
nanoseconds. The timeline's metadata goes under ``otherData``, the format's place for it
(chrome://tracing lists it under "Metadata", Perfetto ignores it), after the events:
it is complete only once every part of the timeline was written. The tool's name and
version also go in a small ``metadata`` member before the events, so a reader can tell
our export from the file's first bytes (``json_trace_head``) without reading it whole.

Every process and thread is named first (the timeline's layout), then the timeline is
written one part (time chunk) at a time: its slices, its launch flows' ends, its
counters.

Slices, the bulk of any trace, are written a block at a time as rows of a byte matrix
(``chrome_rows``): numbers formatted a column at a time, no dict or string per event;
the few metadata and counter events are dicts serialised with orjson. Against
tf.timeline on the same events: bench/export_vs_tf_timeline.py, bench/results/cpu-export.txt.

Launch flows are flow events after a part's slices, built the same way: ``"ph":"s"`` on
the API call's thread at its start, ``"ph":"f","bp":"e"`` on the GPU slice's lane at
its start, one id per arrow (``flow_ends``), each written with the part that holds its
slice. Viewers bind each to the slice enclosing it on that thread; written after the
slices, so a viewer that orders events by time (Perfetto) has opened that slice by then.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from tfprof.collector.export.args import pick
from tfprof.collector.export.chrome_rows import DimText, NameText, Rows, flow_rows, slice_rows
from tfprof.collector.export.flow_ends import flow_ends
from tfprof.collector.export.output import CHUNK_EVENTS, BinaryOutput, BlockPipeline
from tfprof.collector.timeline.metadata import tool_tag
from tfprof.collector.timeline.model import (
    CounterTrack,
    SliceTrack,
    Timeline,
    TimelineLayout,
    TimelinePart,
)
from tfprof.core.counters import counter_parts

if TYPE_CHECKING:
    from tfprof.collector.export.chrome_stacks import ChromeStacks
from tfprof.core.slice_args import SLICE_CATEGORIES

# Slices are written by kind in SLICE_CATEGORIES' order, unknown kinds last (None).
_PLACED_KINDS: tuple[int | None, ...] = (*SLICE_CATEGORIES, None)
_UNKNOWN_PLACE = len(SLICE_CATEGORIES)
_KIND_PLACE = np.full(max(SLICE_CATEGORIES) + 1, _UNKNOWN_PLACE, dtype=np.int64)
_KIND_PLACE[list(SLICE_CATEGORIES)] = np.arange(len(SLICE_CATEGORIES))


class ChromeReporter:
    """Renders a ``Timeline``, a part at a time, as Chrome trace event JSON."""

    format_name = "chrome"

    def __init__(self, timeline: Timeline, chunk_events: int = CHUNK_EVENTS) -> None:
        self.timeline = timeline
        self.chunk_events = max(1, chunk_events)
        self._names = NameText(())
        self._dims = DimText()
        # Python stacks to add (export/chrome_stacks.py): sample events after the
        # timeline's, and the stackFrames member; set by whoever writes the file.
        self.stacks: ChromeStacks | None = None

    def render(self, outfile: BinaryOutput) -> None:
        """Write the whole trace to a binary file object."""
        timeline = self.timeline
        outfile.write(b'{"displayTimeUnit":"ns","metadata":')
        outfile.write(orjson.dumps({"tool": tool_tag()}))
        outfile.write(b',"traceEvents":[')
        names = _dict_events(self._metadata_events(timeline.layout))
        first = names.nbytes == 0
        if not first:
            outfile.write(names.finish()[1:])  # the first event has no comma before it
        # Blocks are laid out here, filled and written on two threads (BlockPipeline).
        with BlockPipeline(outfile) as pipeline:
            for part in timeline.parts():
                for block in self._blocks(part):
                    if block.nbytes == 0:
                        continue
                    pipeline.put(block.finish, skip=int(first))  # every event starts with a comma
                    first = False
                del part  # its records are released before the next part is read
        if self.stacks is not None:
            for chunk in self.stacks.events():
                outfile.write(chunk[1:] if first else chunk)  # no comma before the first
                first = False
        outfile.write(b'],"otherData":')
        outfile.write(orjson.dumps(timeline.metadata))
        if self.stacks is not None:
            self.stacks.members(outfile)
        outfile.write(b"}\n")

    def _blocks(self, part: TimelinePart) -> Iterator[Rows]:
        """The part's events as blocks, each event led by a comma."""
        if len(part.names) != len(self._names.encoded):  # names are only ever appended
            self._names = NameText(part.names)
        for track in part.slices:
            yield from self._slice_blocks(track)
        yield from self._flow_blocks(part)  # after the slices: viewers bind each end to one
        for counter in part.counters:
            for events in self._counter_events(counter):
                yield _dict_events(events)

    def _metadata_events(self, layout: TimelineLayout) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        for proc in layout.processes:
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
        for track in layout.tracks:
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

    def _slice_blocks(self, track: SliceTrack) -> Iterator[Rows]:
        """The slices of one track: by kind, then by the width class of their names,
        each in start order, a chunk at a time (the order does not depend on the chunk
        size). Records of a kind this version does not know come last, shown plainly,
        never dropped."""
        n = len(track)
        if n == 0:
            return
        tids = np.asarray(track.thread_ids, dtype=np.int64)[track.lane]
        width_class = self._names.width_class[track.name_id]
        # One small number per slice, (kind's place, width class), counted once: which
        # groups exist and whether one holds the whole track, without a pass per kind.
        kind = track.kind
        known = (kind >= 0) & (kind < _KIND_PLACE.shape[0])
        place = np.where(known, _KIND_PLACE[np.where(known, kind, 0)], _UNKNOWN_PLACE)
        classes = int(width_class.max()) + 1
        group = place * classes + width_class
        counts = np.bincount(group)
        for g in np.flatnonzero(counts).tolist():
            at, cls = divmod(g, classes)
            rows = None if counts[g] == n else np.flatnonzero(group == g)
            yield from self._chunks(track, _PLACED_KINDS[at], cls, tids, rows, n)

    def _chunks(
        self,
        track: SliceTrack,
        kind: int | None,
        cls: int,
        tids: np.ndarray,
        rows: np.ndarray | None,
        n: int,
    ) -> Iterator[Rows]:
        """Blocks of the slices ``rows`` of the track (None: all ``n``, read as views)."""
        count = n if rows is None else rows.shape[0]
        for a in range(0, count, self.chunk_events):
            b = min(a + self.chunk_events, count)
            sel: slice | np.ndarray = slice(a, b) if rows is None else rows[a:b]
            yield slice_rows(track, kind, sel, self._names, cls, pick(tids, sel), self._dims)

    def _flow_blocks(self, part: TimelinePart) -> Iterator[Rows]:
        """The launch flows the part's slices start (an event on the API call) and end
        (an event on the GPU slice)."""
        for phase, marks in ((b"s", part.starts), (b"f", part.ends)):
            if not len(marks):
                continue
            ends = flow_ends(part, marks.track, marks.slice)
            ids = marks.id
            for a in range(0, len(marks), self.chunk_events):
                b = a + self.chunk_events
                yield flow_rows(phase, ids[a:b], ends.pid[a:b], ends.tid[a:b], ends.start_ns[a:b])

    def _counter_events(self, counter: CounterTrack) -> Iterator[list[dict[str, Any]]]:
        """One event per sample, the series' name split so that viewers call the counter
        what the Perfetto export calls it (``tfprof.core.counters``)."""
        (name, key), pid, tid = counter_parts(counter.name), counter.pid, counter.tid
        for a in range(0, counter.time_ns.shape[0], self.chunk_events):
            b = a + self.chunk_events
            yield [
                {"ph": "C", "name": name, "pid": pid, "tid": tid, "ts": s, "args": {key: v}}
                for s, v in zip(
                    (counter.time_ns[a:b] / 1000.0).tolist(),
                    counter.values[a:b].tolist(),
                    strict=True,
                )
            ]


def _dict_events(events: list[dict[str, Any]]) -> Rows:
    """Events as bytes, each led by a comma (none for no events)."""
    if not events:
        return Rows((), 0, np.zeros(0, dtype=np.uint8))
    data = orjson.dumps(events)
    return Rows((), 0, np.frombuffer(b"," + data[1:-1], dtype=np.uint8))


__all__ = ["CHUNK_EVENTS", "BinaryOutput", "ChromeReporter"]
