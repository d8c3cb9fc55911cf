"""A small timeline whole in memory: jobs held in memory read as the export reads stored
jobs (``streamed``), every part collected into one. For what is small by nature (a
test's hand-made jobs, a benchmark of the writers); an export of stored jobs renders
the streamed timeline a part at a time instead.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from tfprof.collector.jobdata import JobData
from tfprof.collector.lake.lake_stream import LakeStream
from tfprof.collector.merged.streamed import StreamedTimeline
from tfprof.collector.read.lake_catalog import catalog
from tfprof.collector.read.trace_files import lake_jobs
from tfprof.collector.timeline.model import (
    CounterTrack,
    FlowMarks,
    GroupBy,
    SliceTrack,
    TimelineLayout,
    TimelinePart,
    TraceProcess,
)
from tfprof.collector.timeline.prepare import MergeError, TimeWindow, check_columns

Window = tuple[int | None, int | None]


@dataclass(frozen=True)
class LaunchFlows:
    """Flow ``i`` goes from slice ``from_slice[i]`` of ``slices[from_track[i]]`` (the API
    call) to slice ``to_slice[i]`` of ``slices[to_track[i]]`` (the GPU record, on its
    stream's track), with the GPU record's correlation id."""

    from_track: np.ndarray
    from_slice: np.ndarray
    to_track: np.ndarray
    to_slice: np.ndarray
    correlation: np.ndarray

    def __len__(self) -> int:
        return int(self.correlation.shape[0])


@dataclass
class WholeTimeline:
    """Every part of a timeline in one: a track's slices whole, flows as pairs."""

    group_by: GroupBy
    origin_ns: int
    end_ns: int
    hosts: tuple[str, ...]
    devices: Mapping[str, Any]
    layout: TimelineLayout
    names: tuple[str, ...]
    slices: tuple[SliceTrack, ...]  # one per layout track, in its order
    counters: tuple[CounterTrack, ...]  # one per layout counter, in its order
    flows: LaunchFlows
    metadata: dict[str, Any]
    marks: tuple[FlowMarks, FlowMarks] = field(repr=False, default_factory=lambda: _no_marks())

    @property
    def processes(self) -> tuple[TraceProcess, ...]:
        return self.layout.processes

    @property
    def num_slices(self) -> int:
        return sum(len(t) for t in self.slices)

    def parts(self) -> Iterator[TimelinePart]:
        """The whole timeline as one part (a reporter renders it as any timeline)."""
        starts, ends = self.marks
        yield TimelinePart(self.names, self.slices, self.counters, starts, ends)


def _no_marks() -> tuple[FlowMarks, FlowMarks]:
    return FlowMarks.empty(), FlowMarks.empty()


def streamed_timeline(
    jobs: Sequence[JobData], group_by: GroupBy = "job", window_ns: Window | None = None
) -> StreamedTimeline:
    """The timeline of jobs held in memory (trace files read, hand-made records), read
    through the engine as stored jobs are."""
    window = _window(window_ns)
    for job in jobs:
        for stream in job.streams:
            if not isinstance(stream, LakeStream):
                check_columns(stream)
    lake = [job if all(isinstance(s, LakeStream) for s in job.streams) else lake_jobs([job])[0]
            for job in jobs]  # fmt: skip
    return StreamedTimeline(jobs, catalog(lake, window or TimeWindow()), group_by, window)


def build_timeline(
    jobs: Sequence[JobData], group_by: GroupBy = "job", window_ns: Window | None = None
) -> WholeTimeline:
    """The timeline of jobs held in memory, whole (``streamed_timeline``, collected)."""
    return collect(streamed_timeline(jobs, group_by, window_ns))


def _window(window_ns: Window | None) -> TimeWindow | None:
    if window_ns is None:
        return None
    lo, hi = window_ns
    if lo is not None and hi is not None and lo > hi:
        raise MergeError(f"window starts after it ends: {lo} > {hi}")
    return TimeWindow(lo, hi)


def collect(timeline: StreamedTimeline) -> WholeTimeline:
    """Every part of ``timeline`` in one (small timelines only)."""
    layout = timeline.layout
    pieces: list[list[SliceTrack]] = [[] for _ in layout.tracks]
    samples: list[list[CounterTrack]] = [[] for _ in layout.counters]
    starts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    ends: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    names: Sequence[str] = ()
    for part in timeline.parts():
        names = part.names
        for marks, found in ((part.starts, starts), (part.ends, ends)):
            if len(marks):
                offset = [sum(len(p) for p in pieces[t.track]) for t in part.slices]
                track = np.array([part.slices[i].track for i in marks.track.tolist()], np.int64)
                at = np.array(offset, dtype=np.int64)[marks.track] + marks.slice
                found.append((track, at, marks.id))
        for piece in part.slices:
            pieces[piece.track].append(piece)
        for counter in part.counters:
            samples[counter.index].append(counter)
    slices = tuple(_joined(p) for p in pieces)
    counters = tuple(_joined_counter(c, layout.counters[i]) for i, c in enumerate(samples))
    start_marks, end_marks = _marks(starts), _marks(ends)
    return WholeTimeline(
        timeline.group_by, timeline.origin_ns, timeline.end_ns, timeline.hosts,
        timeline.devices, layout, tuple(names), slices, counters,
        _pairs(start_marks, end_marks, slices), timeline.metadata, (start_marks, end_marks),
    )  # fmt: skip


def _joined(pieces: list[SliceTrack]) -> SliceTrack:
    if len(pieces) == 1:
        piece = pieces[0]
        records = {c: v[piece.rows] for c, v in piece.records.items()}
        return replace(piece, records=records, rows=np.arange(len(piece)))

    def cat(column: str) -> np.ndarray:
        return np.concatenate([getattr(p, column) for p in pieces])

    first = pieces[0]
    records = {c: np.concatenate([p.records[c][p.rows] for p in pieces]) for c in first.records}
    ops = None if first.op_id is None else cat("op_id")
    category = None
    if any(p.category_id is not None for p in pieces):
        category = np.concatenate([
            p.category_id if p.category_id is not None else np.full(len(p), -1, np.int64)
            for p in pieces
        ])  # fmt: skip
    n = sum(len(p) for p in pieces)
    return replace(first, start_ns=cat("start_ns"), duration_ns=cat("duration_ns"),
                   kind=cat("kind"), name_id=cat("name_id"), lane=cat("lane"),
                   rows=np.arange(n), records=records, op_id=ops,
                   category_id=category)  # fmt: skip


def _joined_counter(pieces: list[CounterTrack], place: Any) -> CounterTrack:
    if not pieces:
        none = np.zeros(0, dtype=np.int64)
        return CounterTrack(-1, place.pid, place.tid, place.name, none, none)
    first = pieces[0]
    return replace(first, time_ns=np.concatenate([p.time_ns for p in pieces]),
                   values=np.concatenate([p.values for p in pieces]))  # fmt: skip


def _marks(found: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> FlowMarks:
    if not found:
        return FlowMarks.empty()
    return FlowMarks(*(np.concatenate(c) for c in zip(*found, strict=True)))


def _pairs(starts: FlowMarks, ends: FlowMarks, slices: Sequence[SliceTrack]) -> LaunchFlows:
    """The flows as (API call slice, GPU slice) pairs, in the order their ends come."""
    at = {i: k for k, i in enumerate(starts.id.tolist())}
    first = np.array([at[i] for i in ends.id.tolist()], dtype=np.int64)
    first = first if first.shape[0] else np.zeros(0, dtype=np.int64)
    correlation = np.array(
        [int(slices[t].column("correlation")[s]) for t, s in
         zip(ends.track.tolist(), ends.slice.tolist(), strict=True)], dtype=np.int64,
    )  # fmt: skip
    return LaunchFlows(starts.track[first], starts.slice[first], ends.track, ends.slice,
                       correlation)  # fmt: skip
