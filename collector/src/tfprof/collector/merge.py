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
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from tfprof.collector.lanes import assign_lanes
from tfprof.collector.layout import Layout
from tfprof.collector.metadata import timeline_metadata
from tfprof.collector.model import RECORD_COLUMNS, JobData
from tfprof.collector.prepare import (
    HOST_SERIES,
    MergeError,
    NameTable,
    PreparedStream,
    TimeWindow,
    host_samples,
    prepare_jobs,
)
from tfprof.collector.slice_names import slice_name_ids
from tfprof.collector.timeline import (
    CounterTrack,
    GroupBy,
    SliceTrack,
    Timeline,
    TraceProcess,
)
from tfprof.core.records import RecordKind
from tfprof.core.tracks import TrackKey, TrackKind

Window = tuple[int | None, int | None]


@dataclass(frozen=True)
class _Source:
    """One prepared stream with its kept records' kinds and timeline name ids."""

    prep: PreparedStream
    kind: np.ndarray
    name: np.ndarray

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
        return cls(prep, kind, ids)


@dataclass
class _Task:
    """The streams of one job that share a task label (normally exactly one)."""

    job_label: str
    label: str
    sort_key: tuple[int, int, str, str, int]
    streams: list[PreparedStream] = field(default_factory=list)
    sources: list[_Source] = field(default_factory=list)  # the streams, named

    @property
    def cpu(self) -> TrackKey:
        return TrackKey.for_cpu(self.job_label, self.label)


def build_timeline(
    jobs: Sequence[JobData],
    group_by: GroupBy = "job",
    window_ns: Window | None = None,
) -> Timeline:
    """Merge ``jobs`` into one timeline.

    Record times are shifted by each stream's ``record_shift_ns``, host samples by its
    ``host_shift_ns``. ``window_ns = (lo, hi)`` (collector clock, either end ``None`` for
    open) keeps the slices that overlap ``[lo, hi)``, whole, and the host samples inside
    it. All times are then made relative to the earliest exported event.
    """
    if group_by not in ("job", "gpu"):
        raise MergeError(f"group_by must be 'job' or 'gpu', not {group_by!r}")
    window = _check_window(window_ns)
    kept = window or TimeWindow()
    prepared = prepare_jobs(jobs, kept)
    names = NameTable()
    tasks = _tasks([p.streams for p in prepared], names)
    host: dict[int, dict[str, np.ndarray]] = {}
    for t_index, task in enumerate(tasks):
        samples = host_samples((p.stream for p in task.streams), kept)
        if samples["time_ns"].shape[0]:
            host[t_index] = samples
    earliest = [int(s.prep.start.min()) for t in tasks for s in t.sources if len(s.prep)]
    earliest += [int(samples["time_ns"][0]) for samples in host.values()]
    origin = min(earliest, default=0)

    layout = Layout(group_by)
    slices: list[SliceTrack] = []
    counters: list[CounterTrack] = []

    def add_host(t_index: int) -> None:
        if t_index in host:
            pid, tid = layout.place_host(tasks[t_index].cpu.format())
            rel = host[t_index]["time_ns"] - np.int64(origin)
            for series in HOST_SERIES:
                counters.append(CounterTrack(pid, tid, series, rel, host[t_index][series]))

    for t_index, task in enumerate(tasks):
        for key, parts in _task_tracks(task):
            slices.append(_slice_track(key, parts, origin, layout))
        if group_by == "job":  # the task's host right after its GPUs
            add_host(t_index)
    if group_by == "gpu":  # hosts after every GPU
        for t_index in range(len(tasks)):
            add_host(t_index)

    return Timeline(
        group_by=group_by,
        origin_ns=origin,
        names=names.names,
        processes=tuple(layout.processes()),
        slices=tuple(slices),
        counters=tuple(counters),
        metadata=timeline_metadata(prepared, group_by, origin, window),
    )


def _check_window(window_ns: Window | None) -> TimeWindow | None:
    if window_ns is None:
        return None
    lo, hi = window_ns
    if lo is not None and hi is not None and lo > hi:
        raise MergeError(f"window starts after it ends: {lo} > {hi}")
    return TimeWindow(lo, hi)


def _task_order(task: str) -> tuple[int, int, str]:
    return (0, int(task), task) if task.isdigit() else (1, 0, task)


def _tasks(jobs: Sequence[Sequence[PreparedStream]], names: NameTable) -> list[_Task]:
    """Group each job's streams by task label, in job order then task order.

    Names are interned in that order too, which fixes ``Timeline.names``.
    """
    tasks: list[_Task] = []
    for streams in jobs:
        by_label: dict[str, _Task] = {}
        for prep in streams:
            s = prep.stream
            task = by_label.get(prep.task_label)
            if task is None:
                sort_key = (*_task_order(s.task), s.host, s.pid)
                task = by_label[prep.task_label] = _Task(prep.job_label, prep.task_label, sort_key)
            task.streams.append(prep)
        tasks.extend(sorted(by_label.values(), key=lambda t: t.sort_key))
    for task in tasks:
        task.sources = [_Source.named(prep, names) for prep in task.streams]
    return tasks


_Parts = list[tuple[_Source, np.ndarray]]


def _task_tracks(task: _Task) -> list[tuple[TrackKey, _Parts]]:
    """The task's tracks in timeline order: by GPU ordinal, streams numerically, memcpy last."""
    parts: dict[TrackKey, _Parts] = {}
    for source in task.sources:
        for key, idx in _group_rows(source):
            parts.setdefault(key, []).append((source, idx))
    order = sorted(parts, key=lambda k: (k.gpu, k.kind is TrackKind.MEMCPY, k.stream))
    return [(key, parts[key]) for key in order]


def _slice_track(key: TrackKey, parts: _Parts, origin: int, layout: Layout) -> SliceTrack:
    data = _track_data(parts, origin)
    first = parts[0][0].prep.stream
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
    )


def _group_rows(source: _Source) -> Iterator[tuple[TrackKey, np.ndarray]]:
    """Each stream track's kept-row indices, then each GPU's memcpy track's (the copies)."""
    prep = source.prep
    if len(prep) == 0:
        return
    job, task = prep.job_label, prep.task_label
    device, stream = prep.column("device"), prep.column("stream")

    def on_stream(k: int) -> TrackKey:
        return TrackKey.for_stream(job, task, k >> 32, k & 0xFFFFFFFF)

    yield from _split_by((device << 32) | stream, on_stream)
    copies = np.flatnonzero(source.kind == RecordKind.MEMCPY)
    if copies.shape[0]:
        for key, idx in _split_by(device[copies], lambda k: TrackKey.for_memcpy(job, task, k)):
            yield key, copies[idx]


def _split_by(
    keys: np.ndarray, decode: Callable[[int], TrackKey]
) -> Iterator[tuple[TrackKey, np.ndarray]]:
    if keys.shape[0] and (keys == keys[0]).all():
        yield decode(int(keys[0])), np.arange(keys.shape[0])
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


def _track_data(parts: _Parts, origin: int) -> _TrackData:
    """One track's slices from its parts, in start order, with lanes.

    A track normally comes from one stream and refers to its columns by row; the rare
    track fed by several streams of one process (a reconnect) gets its columns copied.
    """
    if len(parts) == 1:
        source, idx = parts[0]
        rows = source.prep.rows(idx)
        records: Mapping[str, np.ndarray] = source.prep.stream.records
        start, end = source.prep.start[idx], source.prep.end[idx]
        kind, name = source.kind[idx], source.name[idx]
    else:
        records = {
            c: np.concatenate([s.prep.stream.records[c][s.prep.rows(idx)] for s, idx in parts])
            for c in RECORD_COLUMNS
        }
        rows = np.arange(records["kind"].shape[0])
        start = np.concatenate([s.prep.start[idx] for s, idx in parts])
        end = np.concatenate([s.prep.end[idx] for s, idx in parts])
        kind = np.concatenate([s.kind[idx] for s, idx in parts])
        name = np.concatenate([s.name[idx] for s, idx in parts])
    if start.shape[0] > 1 and not (start[1:] >= start[:-1]).all():
        order = np.argsort(start, kind="stable")
        start, end, kind, name, rows = (a[order] for a in (start, end, kind, name, rows))
    lane, num_lanes = assign_lanes(start, end)
    return _TrackData(
        start - np.int64(origin), end - start, kind, name, lane, num_lanes, rows, records
    )


__all__ = [
    "CounterTrack",
    "GroupBy",
    "MergeError",
    "SliceTrack",
    "Timeline",
    "TraceProcess",
    "Window",
    "build_timeline",
]
