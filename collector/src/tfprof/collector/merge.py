"""Merge jobs' GPU activity into one TensorFlow-style timeline.

A pure step: ``JobData`` in, ``Timeline`` out, no files and no gRPC. Everything stays
columnar: a track of the timeline holds numpy arrays for its slices (and reads the other
record columns by row from the stream, without copying them), never one Python object per
record, so ten million records merge in seconds.

Names follow tf.timeline: one pseudo-device per stream,
``/job:<job>/task:<task>/gpu:<N>/stream:<M>``, every copy also on
``/job:<job>/task:<task>/gpu:<N>/memcpy``, host counters on ``/job:<job>/task:<task>/cpu``.
``group_by="gpu"`` instead puts every job's tracks under the physical GPU (by UUID) they
ran on, one thread per track, so jobs sharing a GPU can be seen side by side.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from tfprof.collector.lanes import assign_lanes
from tfprof.collector.model import (
    COPY_KIND_NAMES,
    HOST_COLUMNS,
    RECORD_COLUMNS,
    SYNC_TYPE_NAMES,
    DropCounts,
    JobData,
    StreamData,
)
from tfprof.core.records import RecordKind
from tfprof.core.version import __version__

GroupBy = Literal["job", "gpu"]
Window = tuple[int | None, int | None]

HOST_SERIES: tuple[str, ...] = HOST_COLUMNS[1:]
MEMSET_NAME = "MEMSET"
UNNAMED_KERNEL = "unnamed kernel"
UNKNOWN_ACTIVITY = "unknown activity"
_MEMCPY_TRACK = -1  # stream slot of a GPU's memcpy track in track keys


class MergeError(ValueError):
    """The jobs or the options cannot be merged; the message says why."""


@dataclass(frozen=True)
class TraceProcess:
    """One process of the trace: a pseudo-device, a physical GPU or a task's host."""

    pid: int
    name: str
    sort_index: int


@dataclass(frozen=True)
class SliceTrack:
    """The slices of one pseudo-device, e.g. ``/job:a/task:0/gpu:0/stream:7``, in start order.

    Times, kinds, names and lanes are the track's own arrays; every other record column
    is read through ``rows`` from ``records``, the source stream's columns, which are
    shared rather than copied (``column("bytes")``). ``name_id`` indexes
    ``Timeline.names``: the kernel name, ``MEMCPY<kind>`` for copies, ``MEMSET``. Lane
    ``k`` is drawn on thread ``thread_ids[k]``.
    """

    pid: int
    name: str
    thread_ids: tuple[int, ...]
    thread_names: tuple[str, ...]
    start_ns: np.ndarray  # relative to Timeline.origin_ns, ascending
    duration_ns: np.ndarray
    kind: np.ndarray
    name_id: np.ndarray
    lane: np.ndarray
    rows: np.ndarray
    records: Mapping[str, np.ndarray]

    def __len__(self) -> int:
        return int(self.start_ns.shape[0])

    @property
    def num_lanes(self) -> int:
        return len(self.thread_ids)

    @property
    def end_ns(self) -> np.ndarray:
        return self.start_ns + self.duration_ns

    def column(self, name: str, select: np.ndarray | slice | None = None) -> np.ndarray:
        """A record column (``RECORD_COLUMNS``) for this track's slices, or a selection."""
        rows = self.rows if select is None else self.rows[select]
        return self.records[name][rows]


@dataclass(frozen=True)
class CounterTrack:
    """One host counter series (``cpu_percent``, ``rss_bytes``, ...) of one task."""

    pid: int
    tid: int
    name: str
    time_ns: np.ndarray  # relative to Timeline.origin_ns, ascending
    values: np.ndarray


@dataclass(frozen=True)
class Timeline:
    group_by: GroupBy
    origin_ns: int  # collector-clock time of relative time 0: the earliest exported event
    names: tuple[str, ...]
    processes: tuple[TraceProcess, ...]
    slices: tuple[SliceTrack, ...]
    counters: tuple[CounterTrack, ...]
    metadata: dict[str, Any]

    @property
    def num_slices(self) -> int:
        return sum(len(t) for t in self.slices)


class _Names:
    """Interns event names once for the whole timeline."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self._ids: dict[str, int] = {}

    def intern(self, name: str) -> int:
        found = self._ids.get(name)
        if found is None:
            found = self._ids[name] = len(self.names)
            self.names.append(name)
        return found


@dataclass
class _Task:
    """The processes of one job that share a task label (normally exactly one)."""

    job_index: int
    job_label: str
    label: str
    sort_key: tuple[Any, ...]
    streams: list[StreamData] = field(default_factory=list)

    @property
    def prefix(self) -> str:
        return f"/job:{self.job_label}/task:{self.label}"


@dataclass
class _Prepared:
    """One stream's records after clock shift and window, the columns used for grouping."""

    stream: StreamData
    keep: np.ndarray | None  # kept row indices; None keeps every row
    start: np.ndarray  # shifted absolute start of kept rows
    end: np.ndarray
    kind: np.ndarray
    name: np.ndarray  # global name id of kept rows
    negative_durations: int


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
    lo, hi = _check_window(window_ns)
    job_labels = _job_labels(jobs)
    tasks = _tasks(jobs, job_labels)
    names = _Names()
    prepared = {id(s): _prepare(s, lo, hi, names) for t in tasks for s in t.streams}
    host = {i: _host_samples(t.streams, lo, hi) for i, t in enumerate(tasks)}
    host = {i: samples for i, samples in host.items() if samples["time_ns"].shape[0]}
    earliest = [int(p.start.min()) for p in prepared.values() if p.start.shape[0]]
    earliest += [int(samples["time_ns"][0]) for samples in host.values()]
    origin = min(earliest, default=0)

    layout = _Layout(group_by)
    slices: list[SliceTrack] = []
    counters: list[CounterTrack] = []

    def add_host(t_index: int) -> None:
        if t_index in host:
            pid, tid = layout.place_host(f"{tasks[t_index].prefix}/cpu")
            rel = host[t_index]["time_ns"] - np.int64(origin)
            for series in HOST_SERIES:
                counters.append(CounterTrack(pid, tid, series, rel, host[t_index][series]))

    for t_index, task in enumerate(tasks):
        for (ordinal, slot), parts in _task_tracks(task, prepared):
            suffix = "memcpy" if slot == _MEMCPY_TRACK else f"stream:{slot}"
            name = f"{task.prefix}/gpu:{ordinal}/{suffix}"
            slices.append(_slice_track(name, ordinal, parts, origin, layout))
        if group_by == "job":  # the task's host right after its GPUs
            add_host(t_index)
    if group_by == "gpu":  # hosts after every GPU
        for t_index in range(len(tasks)):
            add_host(t_index)

    metadata = _metadata(jobs, job_labels, tasks, prepared, group_by, origin, window_ns)
    return Timeline(
        group_by=group_by,
        origin_ns=origin,
        names=tuple(names.names),
        processes=tuple(layout.processes()),
        slices=tuple(slices),
        counters=tuple(counters),
        metadata=metadata,
    )


_Parts = list[tuple[_Prepared, np.ndarray]]


def _task_tracks(
    task: _Task, prepared: dict[int, _Prepared]
) -> list[tuple[tuple[int, int], _Parts]]:
    """The task's tracks in timeline order: by GPU ordinal, streams numerically, memcpy last."""
    parts: dict[tuple[int, int], _Parts] = {}
    for stream in task.streams:
        prep = prepared[id(stream)]
        for key, idx in _group_rows(prep):
            parts.setdefault(key, []).append((prep, idx))
    order = sorted(parts, key=lambda k: (k[0], k[1] == _MEMCPY_TRACK, k[1]))
    return [(key, parts[key]) for key in order]


def _slice_track(
    name: str, ordinal: int, parts: _Parts, origin: int, layout: _Layout
) -> SliceTrack:
    data = _track_data(parts, origin)
    first = parts[0][0].stream
    pid, tids, thread_names = layout.place_slices(
        name, data.num_lanes, first.device_uuid(ordinal), _device_name(first, ordinal)
    )
    return SliceTrack(
        pid=pid,
        name=name,
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


def _check_window(window_ns: Window | None) -> tuple[int | None, int | None]:
    if window_ns is None:
        return None, None
    lo, hi = window_ns
    if lo is not None and hi is not None and lo > hi:
        raise MergeError(f"window starts after it ends: {lo} > {hi}")
    return lo, hi


def _job_labels(jobs: Sequence[JobData]) -> list[str]:
    """The job name, or ``<name>.<run_id>`` when runs share a name, so they never merge."""
    run_ids: dict[str, set[str]] = {}
    for job in jobs:
        run_ids.setdefault(job.name, set()).add(job.run_id)
    labels: list[str] = []
    seen: dict[str, int] = {}
    for job in jobs:
        label = f"{job.name}.{job.run_id}" if len(run_ids[job.name]) > 1 else job.name
        seen[label] = seen.get(label, 0) + 1
        # The same (name, run_id) twice is a store bug; still never merge the two.
        labels.append(label if seen[label] == 1 else f"{label}.{seen[label]}")
    return labels


def _task_order(task: str) -> tuple[int, int, str]:
    return (0, int(task), task) if task.isdigit() else (1, 0, task)


def _tasks(jobs: Sequence[JobData], job_labels: list[str]) -> list[_Task]:
    """Group each job's processes by task, in job order then task order.

    Processes of one job that report the same task (a child inheriting its parent's
    RANK) have their own CUDA contexts and streams, so each gets ``<task>.<pid>``
    (``<task>.<host>.<pid>`` when pids repeat across hosts); only streams of the very
    same process (a reconnect) share a task.
    """
    tasks: list[_Task] = []
    for j_index, (job, label) in enumerate(zip(jobs, job_labels, strict=True)):
        by_task: dict[str, dict[tuple[str, int], list[StreamData]]] = {}
        for stream in job.streams:
            procs = by_task.setdefault(stream.task, {})
            procs.setdefault((stream.host, stream.pid), []).append(stream)
        job_tasks: list[_Task] = []
        for task, procs in by_task.items():
            pids = [pid for _, pid in procs]
            for (host, pid), streams in procs.items():
                if len(procs) == 1:
                    task_label = task
                elif pids.count(pid) == 1:
                    task_label = f"{task}.{pid}"
                else:
                    task_label = f"{task}.{host}.{pid}"
                key = (*_task_order(task), host, pid)
                job_tasks.append(_Task(j_index, label, task_label, key, streams))
        job_tasks.sort(key=lambda t: t.sort_key)
        tasks.extend(job_tasks)
    return tasks


def _check_columns(stream: StreamData) -> int:
    missing = [c for c in RECORD_COLUMNS if c not in stream.records]
    if missing:
        raise MergeError(f"job {stream.job!r} pid {stream.pid}: records lack {missing}")
    n = int(stream.records["kind"].shape[0])
    ragged = [c for c in RECORD_COLUMNS if stream.records[c].shape != (n,)]
    if ragged:
        raise MergeError(f"job {stream.job!r} pid {stream.pid}: ragged columns {ragged}")
    return n


def _prepare(stream: StreamData, lo: int | None, hi: int | None, names: _Names) -> _Prepared:
    _check_columns(stream)
    rec = stream.records
    duration = rec["duration_ns"]
    negative = int(np.count_nonzero(duration < 0))
    if negative:
        duration = np.maximum(duration, 0)
    start = rec["start_ns"] + np.int64(stream.record_shift_ns)
    end = start + duration
    keep: np.ndarray | None = None
    if lo is not None or hi is not None:
        mask = np.ones(start.shape[0], dtype=bool)
        if hi is not None:
            mask &= start < hi
        if lo is not None:
            mask &= (end > lo) | (start >= lo)
        if not mask.all():
            keep = np.flatnonzero(mask)
            start, end = start[keep], end[keep]
    kind = rec["kind"] if keep is None else rec["kind"][keep]
    name = rec["name"] if keep is None else rec["name"][keep]
    copy_kind = rec["copy_kind"] if keep is None else rec["copy_kind"][keep]
    sync_type = rec["sync_type"] if keep is None else rec["sync_type"][keep]
    return _Prepared(
        stream=stream,
        keep=keep,
        start=start,
        end=end,
        kind=kind,
        name=_name_ids(stream.strings, kind, name, copy_kind, names, sync_type),
        negative_durations=negative,
    )


def _name_ids(
    strings: list[str],
    kind: np.ndarray,
    name: np.ndarray,
    copy_kind: np.ndarray,
    names: _Names,
    sync_type: np.ndarray | None = None,
) -> np.ndarray:
    """Global name id per record: the kernel name, MEMCPY<kind> for copies, MEMSET, and
    for syncs their own name (Kineto's "Event Sync") or else the sync type's label."""
    n_strings = len(strings)
    valid = (name > 0) & (name < n_strings)
    idx = np.where(valid, name, 0)
    table = np.full(max(n_strings, 1), -1, dtype=np.int32)
    for i in np.unique(idx).tolist():
        if i:
            table[i] = names.intern(strings[i])
    ids = table[idx]
    is_kernel = kind == RecordKind.KERNEL
    unnamed = ids < 0
    if unnamed.any():
        ids[unnamed & is_kernel] = names.intern(UNNAMED_KERNEL)
        ids[unnamed & ~is_kernel] = names.intern(UNKNOWN_ACTIVITY)
    copies = kind == RecordKind.MEMCPY
    if copies.any():
        top = max(COPY_KIND_NAMES)
        copy_table = np.array(
            [names.intern("MEMCPY" + COPY_KIND_NAMES.get(k, "Unknown")) for k in range(top + 1)],
            dtype=np.int32,
        )
        ck = copy_kind[copies]
        ids[copies] = copy_table[np.where((ck >= 0) & (ck <= top), ck, 0)]
    memsets = kind == RecordKind.MEMSET
    if memsets.any():
        ids[memsets] = names.intern(MEMSET_NAME)
    unnamed_syncs = np.flatnonzero(~valid & (kind == RecordKind.SYNC))
    if unnamed_syncs.shape[0] and sync_type is not None:
        for value in np.unique(sync_type[unnamed_syncs]).tolist():
            label = SYNC_TYPE_NAMES.get(int(value), SYNC_TYPE_NAMES[0])
            ids[unnamed_syncs[sync_type[unnamed_syncs] == value]] = names.intern(label)
    return ids


def _group_rows(prep: _Prepared) -> Iterator[tuple[tuple[int, int], np.ndarray]]:
    """(ordinal, stream) -> kept-row indices, then (ordinal, memcpy) -> the copies."""
    rec = prep.stream.records
    if prep.start.shape[0] == 0:
        return
    device = rec["device"] if prep.keep is None else rec["device"][prep.keep]
    stream = rec["stream"] if prep.keep is None else rec["stream"][prep.keep]
    yield from _split_by((device << 32) | stream, lambda k: (k >> 32, k & 0xFFFFFFFF))
    copies = np.flatnonzero(prep.kind == RecordKind.MEMCPY)
    if copies.shape[0]:
        for (ordinal, _), idx in _split_by(device[copies], lambda k: (k, _MEMCPY_TRACK)):
            yield (ordinal, _MEMCPY_TRACK), copies[idx]


def _split_by(keys: np.ndarray, decode: Any) -> Iterator[tuple[tuple[int, int], np.ndarray]]:
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
        prep, idx = parts[0]
        rows = idx if prep.keep is None else prep.keep[idx]
        records: Mapping[str, np.ndarray] = prep.stream.records
        start, end = prep.start[idx], prep.end[idx]
        kind, name = prep.kind[idx], prep.name[idx]
    else:
        pieces: dict[str, list[np.ndarray]] = {c: [] for c in RECORD_COLUMNS}
        for prep, idx in parts:
            part_rows = idx if prep.keep is None else prep.keep[idx]
            for col in RECORD_COLUMNS:
                pieces[col].append(prep.stream.records[col][part_rows])
        records = {c: np.concatenate(p) for c, p in pieces.items()}
        rows = np.arange(records["kind"].shape[0])
        start = np.concatenate([prep.start[idx] for prep, idx in parts])
        end = np.concatenate([prep.end[idx] for prep, idx in parts])
        kind = np.concatenate([prep.kind[idx] for prep, idx in parts])
        name = np.concatenate([prep.name[idx] for prep, idx in parts])
    if start.shape[0] > 1 and not (start[1:] >= start[:-1]).all():
        order = np.argsort(start, kind="stable")
        start, end, kind, name, rows = (
            start[order],
            end[order],
            kind[order],
            name[order],
            rows[order],
        )
    lane, num_lanes = assign_lanes(start, end)
    return _TrackData(
        start - np.int64(origin), end - start, kind, name, lane, num_lanes, rows, records
    )


def _host_samples(
    streams: list[StreamData], lo: int | None, hi: int | None
) -> dict[str, np.ndarray]:
    pieces: dict[str, list[np.ndarray]] = {c: [] for c in HOST_COLUMNS}
    for stream in streams:
        samples = stream.host_samples
        time = samples["time_ns"] + np.int64(stream.host_shift_ns)
        mask = np.ones(time.shape[0], dtype=bool)
        if lo is not None:
            mask &= time >= lo
        if hi is not None:
            mask &= time < hi
        pieces["time_ns"].append(time[mask])
        for series in HOST_SERIES:
            pieces[series].append(np.asarray(samples[series])[mask])
    merged = {c: np.concatenate(p) for c, p in pieces.items()}
    order = np.argsort(merged["time_ns"], kind="stable")
    return {c: v[order] for c, v in merged.items()}


def _device_name(stream: StreamData, ordinal: int) -> str:
    meta = stream.devices.get(ordinal)
    return meta.name if meta else ""


class _Layout:
    """Hands out pids, tids, names and sort indices for either grouping.

    Pids and tids start at 1 and tids are unique across the whole trace: Perfetto treats
    pid 0 as the kernel's swapper and has merged tid 0 with other threads.
    """

    def __init__(self, group_by: GroupBy) -> None:
        self.group_by = group_by
        self._procs: list[TraceProcess] = []
        self._gpu_pid: dict[str, int] = {}
        self._next_tid = 1

    def _tids(self, count: int) -> tuple[int, ...]:
        first = self._next_tid
        self._next_tid += count
        return tuple(range(first, first + count))

    def _new_process(self, name: str) -> int:
        pid = len(self._procs) + 1
        self._procs.append(TraceProcess(pid, name, len(self._procs)))
        return pid

    def place_slices(
        self, track: str, num_lanes: int, uuid: str, device_name: str
    ) -> tuple[int, tuple[int, ...], tuple[str, ...]]:
        tids = self._tids(num_lanes)
        if self.group_by == "job":
            return self._new_process(track), tids, tuple(f"lane {k}" for k in range(num_lanes))
        pid = self._gpu_pid.get(uuid)
        if pid is None:
            label = f"/gpu:{uuid} ({device_name})" if device_name else f"/gpu:{uuid}"
            pid = self._gpu_pid[uuid] = self._new_process(label)
        names = tuple(track if k == 0 else f"{track} lane {k}" for k in range(num_lanes))
        return pid, tids, names

    def place_host(self, name: str) -> tuple[int, int]:
        return self._new_process(name), self._tids(1)[0]

    def processes(self) -> list[TraceProcess]:
        return list(self._procs)


def _drop_dict(d: DropCounts) -> dict[str, int]:
    return {"queue": d.queue, "tracer": d.tracer, "relay": d.relay, "total": d.total}


_NO_KINDS = np.zeros(0, dtype=np.int64)


def _count_kinds(kind: np.ndarray) -> dict[str, int]:
    counts = np.bincount(np.clip(kind, 0, 4), minlength=5)
    kernel, memcpy, memset = (int(counts[k]) for k in (1, 2, 3))
    total = int(kind.shape[0])
    return {
        "kernel": kernel,
        "memcpy": memcpy,
        "memset": memset,
        "other": total - kernel - memcpy - memset,
        "total": total,
    }


def _time_range(preps: list[_Prepared]) -> list[int] | None:
    live = [p for p in preps if p.start.shape[0]]
    if not live:
        return None
    return [min(int(p.start.min()) for p in live), max(int(p.end.max()) for p in live)]


def _metadata(
    jobs: Sequence[JobData],
    job_labels: list[str],
    tasks: list[_Task],
    prepared: dict[int, _Prepared],
    group_by: GroupBy,
    origin: int,
    window_ns: Window | None,
) -> dict[str, Any]:
    task_label = {id(s): t.label for t in tasks for s in t.streams}
    jobs_meta: list[dict[str, Any]] = []
    devices: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    clocks: list[dict[str, Any]] = []
    overall = DropCounts()
    clamped = 0
    for job, label in zip(jobs, job_labels, strict=True):
        task_meta: list[dict[str, Any]] = []
        preps = [prepared[id(s)] for s in job.streams]
        for stream, prep in zip(job.streams, preps, strict=True):
            task = task_label[id(stream)]
            clamped += prep.negative_durations
            task_meta.append(
                {
                    "task": task,
                    "host": stream.host,
                    "pid": stream.pid,
                    "argv": list(stream.argv),
                    "source": stream.source,
                    "finished": stream.finished,
                    "exit_code": stream.exit_code,
                    "records": _count_kinds(prep.kind),
                    "records_outside_window": stream.num_records - int(prep.kind.shape[0]),
                    "time_range_ns": _time_range([prep]),
                    "dropped": _drop_dict(stream.dropped),
                }
            )
            devices.setdefault(label, {}).setdefault(task, {}).update(
                {
                    str(o): {
                        "uuid": stream.device_uuid(o),
                        "name": m.name,
                        "pci_bus_id": m.pci_bus_id,
                        "compute_capability": "{}.{}".format(*m.compute_capability),
                        "sm_count": m.sm_count,
                        "memory_bytes": m.memory_bytes,
                    }
                    for o, m in sorted(stream.devices.items())
                }
            )
            clocks.append(
                {
                    "job": label,
                    "task": task,
                    "host": stream.host,
                    "pid": stream.pid,
                    "record_shift_ns": stream.record_shift_ns,
                    "host_shift_ns": stream.host_shift_ns,
                    "clock_rtt_ns": stream.clock_rtt_ns,
                }
            )
        dropped = job.dropped
        overall.queue += dropped.queue
        overall.tracer += dropped.tracer
        overall.relay += dropped.relay
        jobs_meta.append(
            {
                "name": job.name,
                "run_id": job.run_id,
                "label": label,
                "hosts": sorted({s.host for s in job.streams}),
                "finished": all(s.finished for s in job.streams),
                "tasks": task_meta,
                "records": {
                    k: sum(t["records"][k] for t in task_meta) for k in _count_kinds(_NO_KINDS)
                },
                "time_range_ns": _time_range(preps),
                "dropped": _drop_dict(dropped),
            }
        )
    lo, hi = window_ns if window_ns is not None else (None, None)
    return {
        "tool": {"name": "tfprof-agent", "version": __version__},
        "group_by": group_by,
        "origin_ns": origin,
        "window_ns": None if window_ns is None else [lo, hi],
        "jobs": jobs_meta,
        "devices": devices,
        "dropped": _drop_dict(overall),
        "clocks": clocks,
        "clamped_negative_durations": clamped,
    }
