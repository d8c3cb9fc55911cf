"""Merge jobs' GPU activity into one TensorFlow-style timeline.

A pure step: ``JobData`` in, ``Timeline`` out, no files and no gRPC. The shared
``prepare`` step labels, shifts and windows the records; this module groups them into
tracks, orders each track's slices and gives them lanes, so ten million records merge in
seconds.

Track names follow tf.timeline (``tfprof.core.tracks.TrackKey``): one pseudo-device per
stream, ``/job:<job>/task:<task>/gpu:<N>/stream:<M>``, every copy also on
``/job:<job>/task:<task>/gpu:<N>/memcpy``, host counters on ``/job:<job>/task:<task>/cpu``.
``group_by="gpu"`` instead puts every job's tracks under the physical GPU (by UUID) they
ran on, one thread per track, so jobs sharing a GPU can be seen side by side.

The host side: CUDA API calls and host ranges (MARKER records with a thread) go on the
task's host thread tracks ``/job:<job>/task:<task>/cpu/thread:<TID>``; MARKER records
without a thread (Kineto's ``gpu_user_annotation``) on their GPU stream; MEMORY records
become one counter per device, ``gpu:<N> allocated_bytes``, on the task's host. Each GPU
record linked to its API call (``flows``) gives a ``Timeline.flows`` arrow, and each is
attributed to the host range it ran for (``attribution``: ``SliceTrack.op_id``).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tfprof.collector.jobdata import RECORD_COLUMNS, JobData, StreamData
from tfprof.collector.timeline.attribution import HOW_NONE, OpAttribution, attribute_ops
from tfprof.collector.timeline.flows import LaunchLinks, is_launched
from tfprof.collector.timeline.lanes import assign_lanes
from tfprof.collector.timeline.layout import Layout
from tfprof.collector.timeline.memory_levels import MemorySeries, memory_series, peak_of
from tfprof.collector.timeline.metadata import MetadataBuilder, device_metadata
from tfprof.collector.timeline.model import (
    CounterTrack,
    GroupBy,
    LaunchFlows,
    PartedTimeline,
    SliceTrack,
    Timeline,
    TimelinePart,
    TraceProcess,
    collect,
)
from tfprof.collector.timeline.prepare import (
    HOST_SERIES,
    MergeError,
    NameTable,
    PreparedStream,
    TimeWindow,
    host_samples,
    job_labels,
    prepare_stream,
    task_labels,
)
from tfprof.collector.timeline.slice_names import slice_name_ids
from tfprof.collector.timeline.time_origin import StoredStream, origin_ns
from tfprof.collector.timeline.untraced_spans import untraced_track
from tfprof.core.counters import memory_counter
from tfprof.core.records import RecordKind
from tfprof.core.tracks import TrackKey, TrackKind

Window = tuple[int | None, int | None]


@dataclass(frozen=True)
class _Source:
    """One prepared stream with its kept records' kinds and timeline name ids (and the
    name ids of its MARKER records' categories, -1 on other rows; None without any)."""

    prep: PreparedStream
    kind: np.ndarray
    name: np.ndarray
    category: np.ndarray | None

    @classmethod
    def named(cls, prep: PreparedStream, names: NameTable) -> _Source:
        kind = prep.column("kind")
        ids = slice_name_ids(
            names,
            prep.stream.strings,
            kind,
            prep.column("name"),
            prep.column("copy_kind"),
            prep.column("sync_type"),
        )
        marker = kind == RecordKind.MARKER
        if not marker.any():
            return cls(prep, kind, ids, None)
        category = np.where(marker, prep.column("category"), 0)
        return cls(prep, kind, ids, names.intern_column(prep.stream.strings, category, -1))


@dataclass
class _Task:
    """The streams of one job that share a task label (normally exactly one process).

    ``sources``, ``track_of`` and ``slice_of`` hold the task's loaded records while its
    part is merged and rendered, and are emptied after."""

    job_index: int
    job_label: str
    label: str
    sort_key: tuple[int, int, str, str, int]
    streams: list[tuple[int, StreamData]] = field(default_factory=list)  # (index in job)
    sources: list[_Source] = field(default_factory=list)  # the streams, prepared and named
    # Per source, per kept row: its slice on its stream or thread track (not the
    # memcpy repeat) as (index into the part's slices, index in that track), -1: none.
    track_of: list[np.ndarray] = field(default_factory=list)
    slice_of: list[np.ndarray] = field(default_factory=list)

    @property
    def cpu(self) -> TrackKey:
        return TrackKey.for_cpu(self.job_label, self.label)

    def place(self, track: int, key: TrackKey, origin: _TrackData) -> None:
        """Remember where the slices of ``origin`` went, unless ``key`` repeats them."""
        if key.kind is TrackKind.MEMCPY:
            return
        if not self.track_of:
            self.track_of = [np.full(len(s.prep), -1, dtype=np.int64) for s in self.sources]
            self.slice_of = [np.full(len(s.prep), -1, dtype=np.int64) for s in self.sources]
        if isinstance(origin.part, int):  # one source: every slice, in order
            self.track_of[origin.part][origin.kept] = track
            self.slice_of[origin.part][origin.kept] = np.arange(origin.kept.shape[0])
            return
        for part in np.unique(origin.part).tolist():
            sel = np.flatnonzero(origin.part == part)
            self.track_of[part][origin.kept[sel]] = track
            self.slice_of[part][origin.kept[sel]] = sel

    def release(self) -> None:
        self.sources, self.track_of, self.slice_of = [], [], []

    def has_host_records(self) -> bool:
        """Whether the task has a record to link or attribute GPU records to: an API call
        or a MARKER (``_Source.category`` is None exactly when a source holds no MARKER)."""
        return any(
            s.category is not None or bool((s.kind == RecordKind.API).any()) for s in self.sources
        )


def build_timeline(
    jobs: Sequence[JobData],
    group_by: GroupBy = "job",
    window_ns: Window | None = None,
) -> Timeline:
    """Merge ``jobs`` into one timeline (every part of ``timeline_parts`` at once)."""
    return collect(timeline_parts(jobs, group_by, window_ns))


def timeline_parts(
    jobs: Sequence[JobData],
    group_by: GroupBy = "job",
    window_ns: Window | None = None,
) -> PartedTimeline:
    """Merge ``jobs`` into a timeline delivered one task (process) at a time.

    Record times are shifted by each stream's ``record_shift_ns``, host samples by its
    ``host_shift_ns``. ``window_ns = (lo, hi)`` (collector clock, either end ``None`` for
    open) keeps the slices that overlap ``[lo, hi)``, whole, and the host samples inside
    it. All times are then made relative to the earliest exported event, found first by
    a pass over times only (``time_origin``).

    A stored stream (``lake.reader.LakeStream``) is loaded while its task's part is
    merged and rendered, and released before the next task's; names are interned in
    task order, so ids are those of a merge of everything at once. With
    ``group_by="gpu"`` a physical GPU's process is made by the first task that uses it
    and shared by the later ones; hosts still sort after every GPU (``Layout``).
    """
    if group_by not in ("job", "gpu"):
        raise MergeError(f"group_by must be 'job' or 'gpu', not {group_by!r}")
    window = _check_window(window_ns)
    kept = window or TimeWindow()
    labels = job_labels(jobs)
    tasks_of = [task_labels(job) for job in jobs]
    tasks = _tasks(jobs, labels, tasks_of)
    origin = origin_ns(jobs, kept)
    meta = MetadataBuilder(jobs, labels, tasks_of, group_by, origin, window)
    merger = _Merger(group_by, origin, kept, meta)
    hosts = tuple(sorted({s.host for job in jobs for s in job.streams}))
    return PartedTimeline(
        group_by,
        origin,
        merger.parts(tasks),
        merger.finish,
        hosts,
        device_metadata(jobs, labels, tasks_of),
    )


@contextlib.contextmanager
def _loaded(streams: Sequence[StreamData]) -> Iterator[None]:
    """Every stored stream of a task loaded for the duration of the block."""
    with contextlib.ExitStack() as stack:
        for stream in streams:
            if isinstance(stream, StoredStream):
                # Every record column: the formats write launch geometry, registers, ...
                stack.enter_context(stream.loaded(host=True, columns=RECORD_COLUMNS))
        yield


class _Merger:
    """Merges tasks into parts one at a time; keeps what the metadata needs of each."""

    def __init__(
        self, group_by: GroupBy, origin: int, window: TimeWindow, meta: MetadataBuilder
    ) -> None:
        self.origin = origin
        self.window = window
        self.meta = meta
        self.layout = Layout(group_by)
        self.names = NameTable()
        self.flows = 0
        self.counters = 0
        self.host_meta: dict[str, Any] = {"flows": {}, "tasks": []}
        self.memory: list[tuple[_Task, list[MemorySeries]]] = []

    def parts(self, tasks: Sequence[_Task]) -> Iterator[TimelinePart]:
        for task in tasks:
            with _loaded([s for _, s in task.streams]):
                preps = [
                    prepare_stream(stream, self.window, task.job_label, task.label)
                    for _, stream in task.streams
                ]
                for (index, _), prep in zip(task.streams, preps, strict=True):
                    self.meta.add(task.job_index, index, prep)
                task.sources = [_Source.named(prep, self.names) for prep in preps]
                del preps
                try:
                    yield self._part(task)
                finally:
                    task.release()

    def _part(self, task: _Task) -> TimelinePart:
        layout, origin = self.layout, self.origin
        known = len(layout.processes())
        slices: list[SliceTrack] = []
        counters: list[CounterTrack] = []
        linkable = task.has_host_records()  # else no flow, no attribution: nothing to place

        def add_slices(tracks: list[tuple[TrackKey, _Parts]]) -> None:
            for (key, parts), data in zip(tracks, _tracks_data(tracks, origin), strict=True):
                if linkable:
                    task.place(len(slices), key, data)
                slices.append(_slice_track(key, parts, data, layout, task.cpu.format()))

        add_slices(_task_tracks(task, host_side=False))
        host_name = task.cpu.format()
        samples = host_samples((s.prep.stream for s in task.sources), self.window)
        if samples["time_ns"].shape[0]:
            pid, tid = layout.place_host(host_name)
            rel = samples["time_ns"] - np.int64(origin)
            for series in HOST_SERIES:
                counters.append(CounterTrack(pid, tid, series, rel, samples[series]))
        memory = _memory_series(task)
        if memory:
            self.memory.append((task, memory))
        for used in memory:
            pid, tid = layout.place_host(host_name)
            rel = used.time_ns - np.int64(origin)
            name = memory_counter(used.device)
            counters.append(CounterTrack(pid, tid, name, rel, used.allocated))
        add_slices(_task_tracks(task, host_side=True))
        flows = self._link(task, slices) if linkable else self._unlinked(task, slices)
        streams = [stream for _, stream in task.streams]
        host, job, label = task.cpu.format(), task.job_label, task.label
        untraced = untraced_track(
            streams, host, job, label, self.window, layout, self.names, origin
        )
        if untraced is not None:
            slices.append(untraced)
        part = TimelinePart(
            names=self.names.names,
            processes=tuple(layout.processes()[known:]),
            slices=tuple(slices),
            counters=tuple(counters),
            flows=flows,
            first_flow=self.flows,
            first_counter=self.counters,
        )
        self.flows += len(flows)
        self.counters += len(counters)
        return part

    def _link(self, task: _Task, slices: Sequence[SliceTrack]) -> LaunchFlows:
        """The task's launch flows and op attribution, placed on its slices."""
        if not task.track_of or not sum(len(s.prep) for s in task.sources):
            return LaunchFlows.empty()
        records, strings = _task_records(task, self.names)
        attribution = attribute_ops(records, strings)
        track = np.concatenate(task.track_of)
        index = np.concatenate(task.slice_of)
        links = attribution.links
        placed = (track[links.api] >= 0) & (track[links.gpu] >= 0)
        api, gpu = links.api[placed], links.gpu[placed]
        flows = LaunchFlows(
            track[api], index[api], track[gpu], index[gpu], records["correlation"][gpu]
        )
        _place_ops(attribution, records, track, index, slices)
        self._count_links(task, attribution)
        return flows

    def _unlinked(self, task: _Task, slices: Sequence[SliceTrack]) -> LaunchFlows:
        """``_link`` for a task without API calls or MARKERs (a GPU-only trace): the same
        counts, every GPU record unlinked and unattributed, without building the task's
        table."""
        if slices:  # as _link: a task with no slice on a stream or thread track counts none
            self._count_links(task, _unlinked_attribution(task.sources))
        return LaunchFlows.empty()

    def _count_links(self, task: _Task, attribution: OpAttribution) -> None:
        stats = {**attribution.links.stats(), **attribution.counts()}
        self.host_meta["tasks"].append({"job": task.job_label, "task": task.label, **stats})
        total = self.host_meta["flows"]
        for k, v in stats.items():
            total[k] = total.get(k, 0) + v

    def finish(self) -> dict[str, Any]:
        metadata = self.meta.finish()
        metadata["host_side"] = self.host_meta
        metadata["host_side"]["memory_peak_bytes"] = _memory_peaks(self.memory)
        return metadata


def _unlinked_attribution(sources: Sequence[_Source]) -> OpAttribution:
    """What ``attribute_ops`` finds for records without API calls or MARKERs: no link
    (GPU records with correlation 0 are unknown, the others miss their API call) and no
    op; only the counts are filled in."""
    launched = unknown = 0
    for source in sources:
        gpu = is_launched(source.kind)
        launched += int(np.count_nonzero(gpu))
        unknown += int(np.count_nonzero(gpu & (source.prep.column("correlation") == 0)))
    none = np.zeros(0, dtype=np.int64)
    links = LaunchLinks(none, none, unknown, launched - unknown, 0)
    return OpAttribution(none, none, np.full(launched, HOW_NONE, dtype=np.int64), links)


def _check_window(window_ns: Window | None) -> TimeWindow | None:
    if window_ns is None:
        return None
    lo, hi = window_ns
    if lo is not None and hi is not None and lo > hi:
        raise MergeError(f"window starts after it ends: {lo} > {hi}")
    return TimeWindow(lo, hi)


def _task_order(task: str) -> tuple[int, int, str]:
    return (0, int(task), task) if task.isdigit() else (1, 0, task)


def _tasks(
    jobs: Sequence[JobData], labels: Sequence[str], tasks_of: Sequence[Sequence[str]]
) -> list[_Task]:
    """Group each job's streams by task label, in job order then task order (the order
    parts come in and names are interned in)."""
    tasks: list[_Task] = []
    for j, (job, job_label) in enumerate(zip(jobs, labels, strict=True)):
        by_label: dict[str, _Task] = {}
        for index, (s, label) in enumerate(zip(job.streams, tasks_of[j], strict=True)):
            task = by_label.get(label)
            if task is None:
                sort_key = (*_task_order(s.task), s.host, s.pid)
                task = by_label[label] = _Task(j, job_label, label, sort_key)
            task.streams.append((index, s))
        tasks.extend(sorted(by_label.values(), key=lambda t: t.sort_key))
    return tasks


# (the source's index in its task, the source, kept-row indices of the source on the track)
_Parts = list[tuple[int, _Source, np.ndarray]]


def _task_tracks(task: _Task, host_side: bool) -> list[tuple[TrackKey, _Parts]]:
    """The task's GPU tracks (by GPU ordinal, streams numerically, memcpy last) or its
    host thread tracks (by thread id), in timeline order."""
    parts: dict[TrackKey, _Parts] = {}
    for s_index, source in enumerate(task.sources):
        for key, idx in _group_rows(source):
            if key.is_host == host_side:
                parts.setdefault(key, []).append((s_index, source, idx))
    order = sorted(parts, key=lambda k: (k.gpu, k.kind is TrackKind.MEMCPY, k.stream, k.thread))
    return [(key, parts[key]) for key in order]


def _slice_track(
    key: TrackKey, parts: _Parts, data: _TrackData, layout: Layout, host: str
) -> SliceTrack:
    first = parts[0][1].prep.stream
    if key.is_host:
        pid, tids, thread_names = layout.place_thread(host, key.thread, data.num_lanes)
    else:
        meta = first.devices.get(key.gpu)
        pid, tids, thread_names = layout.place_slices(
            key.format(), data.num_lanes, first.device_uuid(key.gpu), meta.name if meta else ""
        )
    return SliceTrack(
        pid=pid,
        key=key,
        thread_ids=tids,
        thread_names=thread_names,
        start_ns=data.start,
        duration_ns=data.duration,
        kind=data.kind,
        name_id=data.name,
        lane=data.lane,
        rows=data.rows,
        records=data.records,
        op_id=None if key.is_host else np.full(len(data.start), -1, dtype=np.int64),
        category_id=data.category,
    )


def _group_rows(source: _Source) -> Iterator[tuple[TrackKey, np.ndarray]]:
    """Each stream track's kept-row indices, each host thread track's, then each GPU's
    memcpy track's (the copies). MEMORY records go on no track (``_memory_series``)."""
    prep = source.prep
    if len(prep) == 0:
        return
    job, task = prep.job_label, prep.task_label
    device, stream = prep.column("device"), prep.column("stream")
    thread = prep.column("thread")
    on_thread = (source.kind == RecordKind.API) | (
        (source.kind == RecordKind.MARKER) & (thread != 0)
    )
    on_gpu = ~on_thread & (source.kind != RecordKind.MEMORY)

    if on_gpu.all():
        yield from _split_by_stream(job, task, device, stream)
    else:
        gpu_rows = np.flatnonzero(on_gpu)
        for key, idx in _split_by_stream(job, task, device[gpu_rows], stream[gpu_rows]):
            yield key, gpu_rows[idx]
        host_rows = np.flatnonzero(on_thread)
        for key, idx in _split_by(thread[host_rows], lambda t: TrackKey.for_thread(job, task, t)):
            yield key, host_rows[idx]
    copies = np.flatnonzero(source.kind == RecordKind.MEMCPY)
    if copies.shape[0]:
        for key, idx in _split_by(device[copies], lambda k: TrackKey.for_memcpy(job, task, k)):
            yield key, copies[idx]


def _split_by_stream(
    job: str, task: str, device: np.ndarray, stream: np.ndarray
) -> Iterator[tuple[TrackKey, np.ndarray]]:
    """The rows of each (device, stream), by device then stream. The usual small
    ordinals make one key of at most 16 bits, which numpy sorts by radix, faster than a
    64-bit key's merge sort (bench/results/cpu-design-choices.txt, "sort")."""
    if device.shape[0] == 0:
        return
    streams = int(stream.max()) + 1
    if device.min() >= 0 and stream.min() >= 0 and (int(device.max()) + 1) * streams <= 1 << 16:
        yield from _split_by(
            device * streams + stream,
            lambda k: TrackKey.for_stream(job, task, k // streams, k % streams),
        )
        return
    yield from _split_by(
        (device << 32) | stream,
        lambda k: TrackKey.for_stream(job, task, k >> 32, k & 0xFFFFFFFF),
    )


def _split_by(
    keys: np.ndarray, decode: Callable[[int], TrackKey]
) -> Iterator[tuple[TrackKey, np.ndarray]]:
    """The rows of each distinct key, in key order, each ascending."""
    if keys.shape[0] == 0:
        return
    if (keys == keys[0]).all():
        yield decode(int(keys[0])), np.arange(keys.shape[0])
        return
    low = int(keys.min())
    if int(keys.max()) - low < 1 << 16:
        # A stable sort of 16-bit codes is a radix sort; a count per code gives the runs.
        codes = (keys - low).astype(np.uint16)
        order = np.argsort(codes, kind="stable")
        counts = np.bincount(codes)
        present = np.flatnonzero(counts)
        ends = np.cumsum(counts[present]).tolist()
        for code, a, b in zip(present.tolist(), [0, *ends[:-1]], ends, strict=True):
            yield decode(low + code), order[a:b]
        return
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    cuts = np.flatnonzero(sorted_keys[1:] != sorted_keys[:-1]) + 1
    bounds = [0, *cuts.tolist(), int(keys.shape[0])]
    for a, b in itertools.pairwise(bounds):
        yield decode(int(sorted_keys[a])), order[a:b]


@dataclass
class _TrackData:
    start: np.ndarray
    duration: np.ndarray
    kind: np.ndarray
    name: np.ndarray
    lane: np.ndarray
    num_lanes: int
    rows: np.ndarray
    records: Mapping[str, np.ndarray]
    part: np.ndarray | int  # per slice (or for all): the index of its source in the task
    kept: np.ndarray  # per slice: its kept-row index in that source
    category: np.ndarray | None  # per slice: a MARKER's category name id, else -1; or None


PARALLEL_SLICES = 1 << 16  # tracks holding more are ordered and laned on two threads


def _tracks_data(tracks: Sequence[tuple[TrackKey, _Parts]], origin: int) -> list[_TrackData]:
    """``_track_data`` of each track, in order; on two threads when there is much to do
    (numpy's gathers and sorts let go of the GIL)."""
    sizes = [sum(idx.shape[0] for _, _, idx in parts) for _, parts in tracks]
    if len(tracks) < 2 or sum(sizes) < PARALLEL_SLICES:
        return [_track_data(parts, origin) for _, parts in tracks]
    with ThreadPoolExecutor(2, thread_name_prefix="tfprof-merge") as pool:
        return list(pool.map(lambda track: _track_data(track[1], origin), tracks))


def _track_data(parts: _Parts, origin: int) -> _TrackData:
    """One track's slices from its parts, in start order, with lanes.

    A track normally comes from one stream and refers to its columns by row (each
    column gathered once, already in start order: a host thread's track holds most of
    a process's records); the rare track fed by several streams of one process (a
    reconnect) gets its columns copied.
    """
    if len(parts) == 1:
        s_index, source, idx = parts[0]
        prep = source.prep
        start = prep.start[idx]
        if start.shape[0] > 1 and not (start[1:] >= start[:-1]).all():
            order = np.argsort(start, kind="stable")
            idx, start = idx[order], start[order]
            del order
        end = prep.end[idx]
        kind, name = source.kind[idx], source.name[idx]
        return _finish_track(
            start, end, kind, name, prep.rows(idx), prep.stream.records,
            s_index, idx, _markers_only(kind, source.category, idx), origin,
        )  # fmt: skip
    records = {
        c: np.concatenate([s.prep.stream.records[c][s.prep.rows(idx)] for _, s, idx in parts])
        for c in RECORD_COLUMNS
    }
    rows = np.arange(records["kind"].shape[0])
    start = np.concatenate([s.prep.start[idx] for _, s, idx in parts])
    end = np.concatenate([s.prep.end[idx] for _, s, idx in parts])
    kind = np.concatenate([s.kind[idx] for _, s, idx in parts])
    name = np.concatenate([s.name[idx] for _, s, idx in parts])
    category = _markers_only(
        kind,
        np.concatenate([_categories(s)[idx] for _, s, idx in parts]),
        slice(None),
    )
    part = np.concatenate([np.full(idx.shape[0], i, dtype=np.int64) for i, _, idx in parts])
    kept = np.concatenate([idx for _, _, idx in parts])
    if start.shape[0] > 1 and not (start[1:] >= start[:-1]).all():
        order = np.argsort(start, kind="stable")
        start, end, kind, name, rows, part, kept = (
            a[order] for a in (start, end, kind, name, rows, part, kept)
        )
        category = None if category is None else category[order]
    return _finish_track(start, end, kind, name, rows, records, part, kept, category, origin)


def _finish_track(
    start: np.ndarray,
    end: np.ndarray,
    kind: np.ndarray,
    name: np.ndarray,
    rows: np.ndarray,
    records: Mapping[str, np.ndarray],
    part: np.ndarray | int,
    kept: np.ndarray,
    category: np.ndarray | None,
    origin: int,
) -> _TrackData:
    lane, num_lanes = assign_lanes(start, end)
    end -= start  # the durations, in place: a track's columns are its own copies
    start -= np.int64(origin)
    return _TrackData(start, end, kind, name, lane, num_lanes, rows, records, part, kept,
                      category)  # fmt: skip


def _categories(source: _Source) -> np.ndarray:
    if source.category is None:
        return np.full(source.kind.shape[0], -1, dtype=np.int32)
    return source.category


def _markers_only(
    kind: np.ndarray, category: np.ndarray | None, idx: np.ndarray | slice
) -> np.ndarray | None:
    """The track's category ids, or None when it holds no MARKER (most tracks)."""
    if category is None or not (kind == RecordKind.MARKER).any():
        return None
    picked: np.ndarray = category[idx]
    return picked


def _memory_series(task: _Task) -> list[MemorySeries]:
    """The task's device-memory series, one per device, on the collector clock."""
    kinds = [s.kind for s in task.sources]
    if not any((k == RecordKind.MEMORY).any() for k in kinds):
        return []
    cols = {
        c: np.concatenate([s.prep.column(c) for s in task.sources])
        for c in ("device", "memory_op", "bytes")
    }
    start = np.concatenate([s.prep.start for s in task.sources])
    return memory_series(
        np.concatenate(kinds), start, cols["device"], cols["memory_op"], cols["bytes"]
    )


def _memory_peaks(
    memory: Sequence[tuple[_Task, list[MemorySeries]]],
) -> dict[str, dict[str, int]]:
    """Peak device memory per job label and physical GPU (its processes summed)."""
    by_gpu: dict[str, dict[str, list[MemorySeries]]] = {}
    for task, series in memory:
        stream = task.streams[0][1]
        for one in series:
            uuid = stream.device_uuid(one.device)
            by_gpu.setdefault(task.job_label, {}).setdefault(uuid, []).append(one)
    return {
        job: {uuid: peak_of(parts) for uuid, parts in gpus.items()} for job, gpus in by_gpu.items()
    }


def _task_records(task: _Task, names: NameTable) -> tuple[dict[str, np.ndarray], list[str]]:
    """The task's kept rows as one table for ``attribute_ops``, with names as strings.

    Names become timeline name ids + 1 (0: no name), so every source of the task (a
    reconnected process) shares one string table: ``("", *names)``.
    """
    cols: dict[str, list[np.ndarray]] = {c: [] for c in _ATTRIBUTION_COLUMNS}
    for source in task.sources:
        prep = source.prep
        cols["kind"].append(source.kind)
        cols["start_ns"].append(prep.start)
        cols["duration_ns"].append(prep.end - prep.start)
        cols["name"].append(source.name.astype(np.int64) + 1)
        category = source.category  # -1 off MARKER rows, as for no name
        cols["category"].append(
            np.zeros(len(prep), np.int64) if category is None else category.astype(np.int64) + 1
        )
        for c in ("thread", "correlation", "external_id"):
            cols[c].append(prep.column(c))
    # One source (the rule): its columns as they are, not copied.
    table = {c: v[0] if len(v) == 1 else np.concatenate(v) for c, v in cols.items()}
    return table, ["", *names.names]


_ATTRIBUTION_COLUMNS = (
    "kind", "start_ns", "duration_ns", "name", "category", "thread", "correlation", "external_id",
)  # fmt: skip


def _place_ops(
    attribution: OpAttribution,
    records: Mapping[str, np.ndarray],
    track: np.ndarray,
    index: np.ndarray,
    slices: Sequence[SliceTrack],
) -> None:
    """Write each attributed GPU record's range name into its stream track's ``op_id``."""
    ok = attribution.marker >= 0
    gpu, marker = attribution.gpu[ok], attribution.marker[ok]
    op_name = records["name"][marker] - 1
    where = track[gpu]
    for t in np.unique(where[where >= 0]).tolist():
        op_ids = slices[t].op_id
        if op_ids is not None:
            mine = where == t
            op_ids[index[gpu[mine]]] = op_name[mine]


__all__ = [
    "CounterTrack",
    "GroupBy",
    "MergeError",
    "PartedTimeline",
    "SliceTrack",
    "Timeline",
    "TimelinePart",
    "TraceProcess",
    "Window",
    "build_timeline",
    "timeline_parts",
]
