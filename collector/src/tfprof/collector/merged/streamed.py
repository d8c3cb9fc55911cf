"""The merged timeline of stored jobs, read through the read engine a time chunk at a
time: what every export renders, in memory bounded by what overlaps in time.

Two passes over the catalog's records (DESIGN: export, issue 27): the first
(``merged.plan``: placing columns and times only) finds the time origin and every
track with its lane count, so the trace's processes and threads are known before its
first slice; the second reads every record column a chunk at a time and makes each
chunk a ``TimelinePart``: its slices on their tracks, laned with carried state (the
lanes the first pass counted), their launch flows and ops (``host_links``), and the
device-memory counter samples (a running total per task and GPU). Each task's host
samples (a sample a second) come last. The metadata (record counts from the first
pass and SQL, link statistics, memory peaks) is complete after the last part.

Names are interned into the read's name table as the chunks come (ids never change,
names are only appended); records are shown whole, as stored: a window keeps those
that overlap it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tfprof.collector.jobdata import RECORD_COLUMNS, JobData
from tfprof.collector.merged.host_links import HOST_QUERIES, HostLinks, Settle
from tfprof.collector.merged.plan import (
    RECORD_TABLES,
    Found,
    PlanSweep,
    TimelinePlan,
    has_host,
    host_samples_of,
    plan,
)
from tfprof.collector.merged.track_rows import PLACING, tasks_of
from tfprof.collector.read import engine, pulled_chunks
from tfprof.collector.read.lake_catalog import Catalog, catalog
from tfprof.collector.read.needs import Got, Query, Sweep
from tfprof.collector.read.time_chunks import Chunk, Columns
from tfprof.collector.timeline.lanes import CarriedLanes
from tfprof.collector.timeline.memory_levels import MemoryLevels
from tfprof.collector.timeline.metadata import StreamFigures, device_metadata, timeline_metadata
from tfprof.collector.timeline.model import (
    CounterTrack,
    GroupBy,
    SliceTrack,
    TimelineLayout,
    TimelinePart,
)
from tfprof.collector.timeline.prepare import (
    HOST_SERIES,
    MergeError,
    TimeWindow,
    job_labels,
    task_labels,
)
from tfprof.collector.timeline.untraced_spans import UNTRACED
from tfprof.core.records import RecordKind
from tfprof.core.tracks import TrackKind

# Every record column a format writes (``slice_args``, the XPlane details), beyond the
# placing ones; ``whole_bytes`` (as stored, never cut by a window) is written as bytes.
COLUMNS = (*PLACING, "slice_name", "domain", "context", "correlation", "external_id",
           "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers",
           "static_smem", "dynamic_smem", "whole_bytes", "copy_kind", "src_kind", "dst_kind",
           "dst_device", "sync_type", "cbid", "return_value", "category", "address",
           "memory_op", "name")  # fmt: skip
# Per process: records stored (in the window or not) and stored negative durations.
# And the span of every record it holds (a stream without capture windows: its one).
STORED = Query(
    "SELECT process, count(*), count(*) FILTER (WHERE negative), min(s), max(e) FROM ("
    "SELECT process, negative, s, e FROM {g_all} UNION ALL "
    "SELECT process, negative, s, e FROM {h_all}) GROUP BY process"
)


@dataclass(frozen=True, eq=False)
class _PlanNeed:
    sweep: PlanSweep
    host: bool

    def queries(self) -> Sequence[Query]:
        return (STORED, *(HOST_QUERIES if self.host else ()))

    def sweeps(self) -> Sequence[Sweep[Any]]:
        return (self.sweep,)

    def build(self, got: Got) -> tuple[Found, dict[int, tuple[int, int, tuple[int, int]]]]:
        stored = {
            int(p): (int(n), int(neg), (int(lo), int(hi))) for p, n, neg, lo, hi in got.rows(STORED)
        }
        return got.swept(self.sweep), stored


class StreamedTimeline:
    """The timeline of the catalog's jobs (``jobs``: the ``JobData`` it was made of,
    for their identity), grouped by job or GPU; ``window``: the one the catalog reads
    (None: the whole run, as the metadata says)."""

    def __init__(
        self,
        jobs: Sequence[JobData],
        cat: Catalog,
        group_by: GroupBy = "job",
        window: TimeWindow | None = None,
    ) -> None:
        if group_by not in ("job", "gpu"):
            raise MergeError(f"group_by must be 'job' or 'gpu', not {group_by!r}")
        self.jobs = jobs
        self.cat = cat
        self.group_by: GroupBy = group_by
        self.window = window
        tasks = tasks_of(cat)
        self.host = has_host(cat)
        need = _PlanNeed(PlanSweep(cat, tuple(tasks)), self.host)
        first, ((found, stored),) = engine.read(cat, [need])
        self._rows = first.query_rows  # the host pieces' queries, for the second pass
        self.plan: TimelinePlan = plan(cat, found, tasks, group_by)
        self._stored = stored
        self.origin_ns = self.plan.origin_ns
        self.layout: TimelineLayout = self.plan.layout
        self.end_ns = max((t.end_ns for t in self.layout.tracks), default=0)
        self.num_slices = sum(t.slices for t in self.layout.tracks)
        self.hosts = tuple(sorted({s.host for job in jobs for s in job.streams}))
        labels = job_labels(jobs)
        self.devices = device_metadata(jobs, labels, [task_labels(j) for j in jobs])
        self._read = False
        self._metadata: dict[str, Any] | None = None

    def parts(self) -> Iterator[TimelinePart]:
        if self._read:
            raise RuntimeError("a timeline's parts can be read once")
        self._read = True
        read, chunks = pulled_chunks.stream(self.cat, RECORD_TABLES, COLUMNS, self._rows)
        builder = _Parts(self.plan, read, self.host)
        for chunk in chunks:
            part = builder.part(chunk)
            if part is not None:
                yield part
        yield builder.host_samples()
        self._metadata = self._finish(builder)

    def _finish(self, builder: _Parts) -> dict[str, Any]:
        found = self.plan.found
        figures = []
        for p in range(len(self.cat.processes)):
            first, last = (int(v) for v in found.spans[p])
            stored, negative, whole = self._stored.get(p, (0, 0, None))
            span = (first, last) if found.kinds[p].sum() else None
            figures.append(StreamFigures(found.kinds[p].tolist(), stored, negative, span, whole))
        metadata = timeline_metadata(self.jobs, self.group_by, self.origin_ns, self.window,
                                     figures)  # fmt: skip
        metadata["host_side"] = {
            **builder.links.metadata(),
            "memory_peak_bytes": builder.memory.peaks(),
        }
        return metadata

    @property
    def metadata(self) -> dict[str, Any]:
        if self._metadata is None:
            raise RuntimeError("the timeline's metadata is complete after its last part")
        return self._metadata


class _Parts:
    """Makes each chunk a part (the second pass)."""

    def __init__(self, found: TimelinePlan, read: engine.Read, host: bool) -> None:
        self.plan = found
        self.read_names = read.names
        self.names = read.names.growing
        self.settle = Settle(read, host)
        tasks = [(t.job_label, t.label) for t in found.tasks]
        counted = [False] * len(tasks)
        for place in found.layout.tracks:
            counted[tasks.index((place.key.job, place.key.task))] = True
        self.links = HostLinks(read, found.found.flows, found.found.rows.task_of, tasks, counted)
        self.lanes = CarriedLanes()
        self.memory = MemoryLevels(found)

    def part(self, chunk: Chunk) -> TimelinePart | None:
        settled = self.settle.feed(chunk)
        if settled is None:
            return None
        cols, launches = settled
        cols["bytes"] = cols.pop("whole_bytes")
        plan = self.plan
        start, duration = cols["start_ns"], cols["duration_ns"]
        end = start + duration
        relative = start - np.int64(plan.origin_ns)
        kind, name = cols["kind"], cols["slice_name"]
        category = _categories(cols)
        tracks: list[tuple[np.ndarray, TrackKind]] = []
        slices: list[SliceTrack] = []
        for track, idx in plan.found.rows.split(cols):
            at = plan.place_of[track]
            place = plan.layout.tracks[at]
            lane = self.lanes.assign(track, start[idx], end[idx])
            tracks.append((idx, place.key.kind))
            mine = None if category is None else category[idx]
            slices.append(SliceTrack(
                at, place.pid, place.key, place.thread_ids, place.thread_names,
                relative[idx], duration[idx], kind[idx], name[idx], lane, idx, cols,
                None, None if mine is None or not (mine >= 0).any() else mine,
            ))  # fmt: skip
        links = self.links.chunk(cols, launches, tracks)
        slices = [links.with_ops(i, s) for i, s in enumerate(slices)]
        counters = self.memory.chunk(cols, relative)
        return TimelinePart(self.names, tuple(slices), counters, links.starts, links.ends)

    def host_samples(self) -> TimelinePart:
        """Every task's host samples in the window (a part of counters only)."""
        plan = self.plan
        counters: list[CounterTrack] = []
        origin = np.int64(plan.origin_ns)
        for t, task in enumerate(plan.tasks):
            first = plan.host_counters.get(t)
            if first is None:
                continue
            samples = host_samples_of(plan.cat, task)
            relative = samples["time_ns"] - origin
            for i, series in enumerate(HOST_SERIES):
                place = plan.layout.counters[first + i]
                counters.append(CounterTrack(first + i, place.pid, place.tid, series, relative,
                                             samples[series]))  # fmt: skip
        return TimelinePart(self.names, self._untraced(), tuple(counters))

    def _untraced(self) -> tuple[SliceTrack, ...]:
        """Each task's spans between its capture windows, on its ``untraced`` track."""
        plan = self.plan
        slices: list[SliceTrack] = []
        origin = np.int64(plan.origin_ns)
        for at, start, end in plan.untraced.values():
            place = plan.layout.tracks[at]
            n = int(start.shape[0])
            zeros = np.zeros(n, dtype=np.int64)
            slices.append(SliceTrack(
                at, place.pid, place.key, place.thread_ids, place.thread_names,
                start - origin, end - start, np.full(n, RecordKind.MARKER, dtype=np.int8),
                np.full(n, self.read_names.intern(UNTRACED), dtype=np.int32),
                np.zeros(n, dtype=np.int32), np.arange(n), {c: zeros for c in RECORD_COLUMNS},
                None, np.full(n, -1, dtype=np.int64),
            ))  # fmt: skip
        return tuple(slices)


def _categories(cols: Mapping[str, np.ndarray]) -> np.ndarray | None:
    """A MARKER's own category name id per row (-1: none, or not a MARKER); None when
    the chunk holds no MARKER."""
    marker = cols["kind"] == RecordKind.MARKER
    if not marker.any():
        return None
    domain = cols["domain"]
    found: np.ndarray = np.where(marker & (domain > 0), domain, -1)
    return found


def streamed(
    jobs: list[JobData], group_by: GroupBy, window: tuple[int | None, int | None] | None
) -> StreamedTimeline:
    """The timeline of ``jobs`` (lake streams) grouped by ``group_by`` in ``window``
    (collector clock; None: everything), read for its layout."""
    kept = None
    if window is not None:
        lo, hi = window
        if lo is not None and hi is not None and lo > hi:
            raise MergeError(f"window starts after it ends: {lo} > {hi}")
        kept = TimeWindow(lo, hi)
    return StreamedTimeline(jobs, catalog(jobs, kept or TimeWindow()), group_by, kept)


__all__ = ["COLUMNS", "Columns", "StreamedTimeline", "streamed"]
