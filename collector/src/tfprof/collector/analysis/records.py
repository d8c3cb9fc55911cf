"""The record window every analysis starts from: one columnar table over all jobs.

``prepare`` runs the shared preparation step (``tfprof.collector.timeline.prepare``: job and task
labels as on the timeline, clock shift, window, name interning), clips the records to
the analysis window, and tags every record with its job, its process and its physical
GPU (by UUID: CUDA ordinals are per process). The columns are numpy arrays with one
value per record; nothing here makes a Python object per record.

GPU activity (kernels, copies, memsets, syncs) is the main table, which every GPU
analysis reads; the host records (API calls, ranges, memory) are kept apart in
``RecordSet.host`` (``host_records``), and each GPU record carries its link to them: the
API call that launched it, the op it ran for, its launch latency and queue depth.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, runtime_checkable

import numpy as np

from tfprof.collector.allocator import reusing_heap
from tfprof.collector.analysis.clipped_rows import ProcessHost, clip_to_window
from tfprof.collector.analysis.host_pass import BATCH_ROWS, ProcessSpan, read_host
from tfprof.collector.analysis.host_records import (
    HOST_COLUMNS,
    HOST_KINDS,
    HostRecords,
    LaunchCalls,
    launches,
)
from tfprof.collector.analysis.intervals import Merged, merge_intervals
from tfprof.collector.errors import AnalysisError
from tfprof.collector.jobdata import JobData, StreamData
from tfprof.collector.read.refs import (
    GpuRef,
    JobRef,
    ProcessRef,
    SampleStats,
    host_stats,
    job_ref,
    sample_stats,
)
from tfprof.collector.timeline.memory_levels import memory_deltas
from tfprof.collector.timeline.prepare import (
    NameTable,
    PreparedStream,
    TimeWindow,
    job_labels,
    prepare_stream,
    rows_of,
    small_unique,
    task_labels,
)
from tfprof.core.records import RecordKind
from tfprof.core.tracks import TrackKey

# Kinds that occupy the GPU; SYNC records are host waits and never count as busy.
GPU_KINDS = (RecordKind.KERNEL, RecordKind.MEMCPY, RecordKind.MEMSET)


@dataclass(frozen=True)
class RecordSet:
    """Every record of the analysed jobs inside ``[start_ns, end_ns)``, clipped to it.

    ``start``/``end`` are absolute collector-clock nanoseconds. ``job``, ``process`` and
    ``gpu`` index ``jobs``, ``processes`` and ``gpus``; ``name`` indexes ``names``.
    Those and ``device`` are held in the smallest signed type that fits (int8 where few):
    cast to int64 before combining them into keys.
    """

    jobs: tuple[JobRef, ...]
    processes: tuple[ProcessRef, ...]
    gpus: tuple[GpuRef, ...]
    names: tuple[str, ...]
    start_ns: int  # the analysis window
    end_ns: int
    kind: np.ndarray
    start: np.ndarray
    end: np.ndarray
    job: np.ndarray
    process: np.ndarray
    gpu: np.ndarray
    device: np.ndarray  # CUDA ordinal inside the process
    stream: np.ndarray
    name: np.ndarray
    bytes: np.ndarray
    copy_kind: np.ndarray
    src_kind: np.ndarray
    dst_kind: np.ndarray
    sync_type: np.ndarray
    correlation: np.ndarray
    # The host side of each GPU record (``host_records.launches``): the ``host`` row of
    # the API call that launched it (-1: none found; a row of ``calls`` when that is
    # given), the ``names`` id of the op it ran for (-1: none), launch latency (ns,
    # unclipped times) and stream queue depth (-1).
    api: np.ndarray
    op: np.ndarray
    latency: np.ndarray
    queue: np.ndarray
    host: HostRecords
    memory_gpus: tuple[GpuRef, ...] = ()  # the GPUs of host MEMORY rows (``host.gpu``)
    # Bytes each (job, memory_gpus index) held before the window began (memory view).
    memory_base: tuple[tuple[int, int, int], ...] = ()
    # The calls ``api`` points to when ``host`` does not hold them (``host_pass``).
    calls: LaunchCalls | None = None

    def __len__(self) -> int:
        return int(self.kind.shape[0])

    @property
    def window_ns(self) -> int:
        return max(0, self.end_ns - self.start_ns)

    @property
    def duration(self) -> np.ndarray:
        duration: np.ndarray = self.end - self.start
        return duration

    def mask(self, *kinds: int) -> np.ndarray:
        """Which records are of one of ``kinds``."""
        if len(kinds) == 1:
            one: np.ndarray = self.kind == kinds[0]
            return one
        return np.isin(self.kind, np.array(kinds, dtype=self.kind.dtype))

    def launch_calls(self) -> LaunchCalls:
        """Duration and name of the calls ``api`` points to."""
        if self.calls is not None:
            return self.calls
        return LaunchCalls(self.host.duration, self.host.name)

    def track(self, process: int, device: int, stream: int) -> TrackKey:
        """The timeline track of records of ``process`` on ``device`` and ``stream``."""
        ref = self.processes[process]
        return TrackKey.for_stream(self.jobs[ref.job].label, ref.task, device, stream)


class HostSelector(Protocol):
    """What a streamed host side keeps (``analysis.host_pass``, ``advice.host_rows``):
    it sees the GPU table first, then each process's host rows in batches (API calls
    before ranges, ranges before memory records), each process once, in order."""

    def start(self, rs: RecordSet, /) -> None:
        """The GPU table, whole and unlinked, before any host row."""

    def __call__(self, rows: ProcessHost, /) -> np.ndarray:
        """Which rows of the batch ``RecordSet.host`` keeps (a boolean mask)."""

    def end_process(self) -> None:
        """The process's last batch has been seen."""

    def end(self) -> None:
        """Every process has been seen (what the selector gathered is complete)."""


# Record columns passed through as they are (bytes is scaled when a copy is clipped).
_COLUMNS = (
    "device", "stream", "bytes", "copy_kind", "src_kind", "dst_kind", "sync_type", "correlation",
)  # fmt: skip
_TAGS = ("kind", "start", "end", "job", "process", "gpu", "name")
_LINKS = ("api", "op", "latency", "queue")


def prepare(
    jobs: Sequence[JobData],
    since_ns: int | None = None,
    until_ns: int | None = None,
    *,
    host: bool = True,
    select: HostSelector | None = None,
    batch_rows: int | None = None,
) -> RecordSet:
    """All records of ``jobs`` overlapping ``[since_ns, until_ns)``, clipped to it.

    Without bounds the window runs from the first record's start to the last one's end.
    Streams read from the lake (``Deferred``) are loaded one process at a time and
    released once its rows are in the table, so only the table stays whole. Without
    ``host``, API calls, ranges and memory records are left out (``RecordSet.host`` is
    empty, no GPU record is linked): the GPU-only views and rules need none of them.
    With ``select``, the host side is streamed in batches of ``batch_rows`` once the
    GPU table is whole (``prepare_gpu_first``, ``GpuFirst``).
    """
    if select is not None and host:
        return prepare_gpu_first(jobs, since_ns, until_ns).read(select, batch_rows or BATCH_ROWS)
    return _prepare(jobs, since_ns, until_ns, linked=host).rs


@dataclass
class GpuFirst:
    """A GPU table read by ``prepare_gpu_first`` (``rs``) and its host side, not read
    yet (``read``). It holds the table so that what no later reader needs can be
    released from it (``release``): the caller keeps no other reference."""

    rs: RecordSet
    _table: _Table
    _spans: tuple[ProcessSpan, ...]
    _window: TimeWindow

    def release(self, columns: Sequence[str]) -> None:
        """Free the GPU table's ``columns``: each reads as zeros from then on (what only
        the GPU rules read, before the host side is)."""
        n = len(self.rs)
        zeros: dict[str, Any] = {}  # replace() checks the names are RecordSet's fields
        for c in columns:
            zeros[c] = np.broadcast_to(np.zeros(1, getattr(self.rs, c).dtype), (n,))
        self.rs = replace(self.rs, **zeros)

    def read(self, select: HostSelector, batch_rows: int = BATCH_ROWS) -> RecordSet:
        """The GPU table with the host side streamed past ``select`` in batches of
        ``batch_rows`` (``host_pass``), also ``rs`` from then on: ``RecordSet.host``
        holds only the rows it keeps, GPU records are linked to their calls
        (``RecordSet.calls``) but not attributed to ops (``op`` and ``queue`` are -1):
        what the advice rules read, without holding any process's host side whole."""
        self.rs = read_host(self.rs, self._table, self._spans, self._window, select, batch_rows)
        return self.rs


def prepare_gpu_first(
    jobs: Sequence[JobData], since_ns: int | None = None, until_ns: int | None = None
) -> GpuFirst:
    """The GPU table (as ``prepare(host=False)``) and its host side, read only when
    asked (``GpuFirst.read``): what reads the GPU records alone (the GPU rules) runs,
    and frees what it made, before any host record is read."""
    return _prepare(jobs, since_ns, until_ns, linked=False)


def _prepare(
    jobs: Sequence[JobData], since_ns: int | None, until_ns: int | None, linked: bool
) -> GpuFirst:
    """``prepare`` without a selector; with ``linked`` the host side is read with the
    GPU records and linked to them, else left out (to be read by ``GpuFirst.read``)."""
    if since_ns is not None and until_ns is not None and since_ns >= until_ns:
        raise AnalysisError(f"the window is empty: since {since_ns} >= until {until_ns} (ns)")
    window = TimeWindow(since_ns, until_ns)
    table = _Table()
    job_refs: list[JobRef] = []
    processes: list[ProcessRef] = []
    spans: list[ProcessSpan] = []
    # Process after process, columns of about the same sizes made and freed.
    with reusing_heap():
        for j, (job, label) in enumerate(zip(jobs, job_labels(jobs), strict=True)):
            # Streams of one process (a reconnect) share a task label and correlation ids.
            by_task: dict[str, list[tuple[StreamData, str, int]]] = {}
            for stream, task in zip(job.streams, task_labels(job), strict=True):
                processes.append(ProcessRef(j, task, stream.host, stream.pid))
                by_task.setdefault(task, []).append((stream, task, len(processes) - 1))
            samples: dict[int, SampleStats | None] = {}
            for group in by_task.values():
                lo = table.gpu_rows
                with _loaded([s for s, _, _ in group], linked):
                    prepared = [
                        (prepare_stream(s, window, label, task), process)
                        for s, task, process in group
                    ]
                    table.add(prepared, window, j, linked)
                    for s, _, process in group:
                        samples[process] = sample_stats(s, window)
                del prepared
                spans.append(ProcessSpan(j, tuple(group), label, lo, table.gpu_rows))
            job_refs.append(job_ref(job, label, host_stats([samples[p] for p in sorted(samples)])))
    columns = table.columns()
    host_records = HostRecords(**table.host_columns())
    starts, ends = columns["start"], columns["end"]
    # Without records (no GPU activity) the host samples still span the run.
    sampled = [j.host for j in job_refs if j.host.samples]
    first = min([int(starts.min())] if starts.shape[0] else [h.start_ns for h in sampled] or [0])
    last = max([int(ends.max())] if ends.shape[0] else [h.end_ns for h in sampled] or [first])
    lo = since_ns if since_ns is not None else first
    hi = until_ns if until_ns is not None else max(last, lo)
    rs = RecordSet(
        jobs=tuple(job_refs),
        processes=tuple(processes),
        gpus=tuple(table.gpus),
        names=table.names.names,
        start_ns=lo,
        end_ns=hi,
        host=host_records,
        memory_gpus=tuple(table.memory_gpus.gpus),
        memory_base=tuple((j, g, b) for (j, g), b in sorted(table.memory_base.items()) if b),
        calls=None,
        **columns,
    )
    return GpuFirst(rs, table, tuple(spans), window)


@runtime_checkable
class Deferred(Protocol):
    """A stream whose records are read only while ``loaded`` (lake/reader.py): with
    ``host`` its host records too, of its record columns only ``columns``."""

    def loaded(
        self, host: bool = True, columns: Sequence[str] = ...
    ) -> contextlib.AbstractContextManager[None]: ...


# The record columns each kind of read uses: GPU records only; everything (linking, op
# attribution, the host views).
_GPU_READ = (
    "start_ns", "duration_ns", "device", "stream", "correlation", "name", "bytes",
    "copy_kind", "src_kind", "dst_kind", "sync_type",
)  # fmt: skip
_ALL_READ = (*_GPU_READ, "thread", "memory_op", "return_value", "external_id", "category")


@contextlib.contextmanager
def _loaded(streams: Sequence[StreamData], host: bool) -> Iterator[None]:
    columns = _ALL_READ if host else _GPU_READ
    with contextlib.ExitStack() as stack:
        for stream in streams:
            if isinstance(stream, Deferred):
                stack.enter_context(stream.loaded(host, columns))
        yield


class _Gpus:
    """Physical GPUs by UUID, numbered in order of appearance."""

    def __init__(self) -> None:
        self.gpus: list[GpuRef] = []
        self._index: dict[str, int] = {}

    def ids(self, stream: StreamData, device: np.ndarray) -> np.ndarray:
        table: dict[int, int] = {}
        for o in small_unique(device).tolist():
            uuid = stream.device_uuid(o)
            if uuid not in self._index:
                meta = stream.devices.get(o)
                self._index[uuid] = len(self.gpus)
                self.gpus.append(
                    GpuRef(uuid, meta.name if meta else "", meta.memory_bytes if meta else 0)
                )
            table[o] = self._index[uuid]
        if len(table) == 1:
            return np.full(device.shape[0], next(iter(table.values())), dtype=np.int32)
        keys = np.array(sorted(table), dtype=np.int64)
        values = np.array([table[k] for k in keys.tolist()], dtype=np.int32)
        ids: np.ndarray = values[np.searchsorted(keys, device)]
        return ids


class _Table:
    """Collects every stream's clipped, tagged columns; interns names and GPUs.

    GPU activity and host records go to separate tables; ``add`` takes one process (its
    streams) at a time so that its GPU records are linked to its API calls and ranges.
    """

    def __init__(self) -> None:
        self.names = NameTable([""])  # id 0: no name
        self._gpus = _Gpus()
        self.memory_gpus = _Gpus()
        self.memory_base: dict[tuple[int, int], int] = {}
        self._parts: dict[str, list[np.ndarray]] = {c: [] for c in (*_TAGS, *_COLUMNS, *_LINKS)}
        self._host: dict[str, list[np.ndarray]] = {c: [] for c in HOST_COLUMNS}
        self._host_rows = 0
        self.gpu_rows = 0

    @property
    def gpus(self) -> list[GpuRef]:
        return self._gpus.gpus

    def add(
        self,
        group: Sequence[tuple[PreparedStream, int]],
        window: TimeWindow,
        job: int,
        host: bool = True,
    ) -> None:
        """One process's streams (``(prepared stream, process index)``); without ``host``
        its GPU records only, unlinked."""
        kinds = [prep.column("kind") for prep, _ in group]
        names = [
            self.names.intern_column(prep.stream.strings, prep.column("name"), unnamed=0)
            for prep, _ in group
        ]
        # Unlinked (without ``host``), the link columns are constants made in ``columns``.
        linked = self._link(group, kinds, names) if host else {}
        if host:
            # The group's host rows in rank order (``_link``'s ``api``) -> their row in
            # the host table, -1 for rows left out.
            ranks: list[np.ndarray] = []
            for (prep, process), kind, name in zip(group, kinds, names, strict=True):
                host_rows = np.flatnonzero(np.isin(kind, _HOST_KINDS))
                ranks.append(self.add_host_rows(prep, host_rows, window, job, process, name))
                self.add_memory_base(prep, window, job)
            rank = _concat(ranks, np.int64)
            if rank.shape[0]:  # else no call to point to: every ``api`` is -1 already
                linked["api"] = np.where(linked["api"] >= 0, rank[np.maximum(linked["api"], 0)], -1)
        gpu_offset = 0
        for (prep, process), kind, name in zip(group, kinds, names, strict=True):
            gpu = (kind >= RecordKind.KERNEL) & (kind <= RecordKind.SYNC)
            gpu_rows = np.flatnonzero(gpu)
            mine = slice(gpu_offset, gpu_offset + gpu_rows.shape[0])
            gpu_offset += gpu_rows.shape[0]
            links = {c: v[mine] for c, v in linked.items()}
            self._add_gpu(prep, gpu_rows, window, job, process, name, links)

    def _link(
        self,
        group: Sequence[tuple[PreparedStream, int]],
        kinds: Sequence[np.ndarray],
        names: Sequence[np.ndarray],
    ) -> dict[str, np.ndarray]:
        """``launches`` over the process's rows; ``api`` as its host-row rank."""
        cols: dict[str, list[np.ndarray]] = {c: [] for c in _LAUNCH_COLUMNS}
        for (prep, _), kind, name in zip(group, kinds, names, strict=True):
            cols["kind"].append(kind)
            cols["start_ns"].append(prep.start)
            cols["duration_ns"].append(prep.end - prep.start)
            cols["correlation"].append(prep.column("correlation"))
            marker = kind == RecordKind.MARKER
            category = self.names.intern_column(
                prep.stream.strings, np.where(marker, prep.column("category"), 0), unnamed=0
            )
            cols["name"].append(name.astype(np.int64))
            cols["category"].append(np.where(marker, category, 0).astype(np.int64))
            for c in ("thread", "external_id", "device", "stream"):
                cols[c].append(prep.column(c))
        records = {c: _concat(v, np.int8 if c == "kind" else np.int64) for c, v in cols.items()}
        found = launches(records, self.names.names)
        host_rank = np.cumsum(np.isin(records["kind"], _HOST_KINDS)) - 1
        api = np.where(found.api >= 0, host_rank[np.maximum(found.api, 0)], -1)
        return {"api": api, "latency": found.latency, "op": found.op, "queue": found.queue}

    def _add_gpu(
        self,
        prep: PreparedStream,
        idx: np.ndarray,
        window: TimeWindow,
        job: int,
        process: int,
        name: np.ndarray,
        links: dict[str, np.ndarray],
    ) -> None:
        m = int(idx.shape[0])
        self.gpu_rows += m
        if m == 0:
            return
        rows = rows_of(idx, prep.start.shape[0])  # all, in a read without the host side
        start, end, fraction = clip_to_window(prep.start[rows], prep.end[rows], window)
        parts = self._parts
        parts["kind"].append(prep.column("kind")[rows].astype(np.int8, copy=False))
        parts["start"].append(start)
        parts["end"].append(end)
        parts["job"].append(np.full(m, job, dtype=np.int32))
        parts["process"].append(np.full(m, process, dtype=np.int32))
        device = prep.column("device")[rows].astype(np.int32, copy=False)  # CUDA ordinals
        parts["gpu"].append(self._gpus.ids(prep.stream, device))
        parts["name"].append(name[rows])
        for c in _COLUMNS:
            values = device if c == "device" else prep.column(c)[rows]
            if c == "bytes" and fraction is not None:
                values = np.rint(values * fraction).astype(np.int64)
            parts[c].append(_narrow(values, _NARROW.get(c)))
        for c, v in links.items():
            parts[c].append(v)

    def add_host_rows(
        self,
        prep: PreparedStream,
        idx: np.ndarray,
        window: TimeWindow,
        job: int,
        process: int,
        name: np.ndarray,
    ) -> np.ndarray:
        """Add the host rows ``idx`` of ``prep`` (``name``: its global names ids); per
        row, its row in the host table."""
        m = int(idx.shape[0])
        if m == 0:
            return np.zeros(0, dtype=np.int64)
        kind = prep.column("kind")[idx]
        start, end, _ = clip_to_window(prep.start[idx], prep.end[idx], window)
        marker = kind == RecordKind.MARKER
        category = prep.column("category")[idx]
        domain = self.names.intern_column(
            prep.stream.strings, np.where(marker, category, 0), unnamed=0
        )
        device = prep.column("device")[idx]
        memory = kind == RecordKind.MEMORY
        gpu = np.full(m, -1, dtype=np.int32)
        if memory.any():
            gpu[memory] = self.memory_gpus.ids(prep.stream, device[memory])
        values = {
            "kind": kind.astype(np.int8),
            "start": start,
            "end": end,
            "job": np.full(m, job, dtype=np.int32),
            "process": np.full(m, process, dtype=np.int32),
            "name": name[idx],
            # Narrow where the values are: interned ids, CUresult, CUPTI enums.
            "category": np.where(marker, domain, category).astype(np.int32),
            "return_value": prep.column("return_value")[idx].astype(np.int32),
            "memory_op": prep.column("memory_op")[idx].astype(np.int8),
            "device": device,
            "gpu": gpu,
        }
        for c in HOST_COLUMNS:
            self._host[c].append(values[c] if c in values else prep.column(c)[idx])
        rank = self._host_rows + np.arange(m, dtype=np.int64)
        self._host_rows += m
        return rank

    def add_memory_base(self, prep: PreparedStream, window: TimeWindow, job: int) -> None:
        """Bytes the process allocated (less freed) on each GPU before the window began."""
        if window.lo is None:
            return
        rec = prep.stream.records
        before = (rec["kind"] == RecordKind.MEMORY) & (
            rec["start_ns"] + np.int64(prep.stream.record_shift_ns) < window.lo
        )
        if not before.any():
            return
        delta = memory_deltas(rec["kind"][before], rec["memory_op"][before], rec["bytes"][before])
        gpus = self.memory_gpus.ids(prep.stream, rec["device"][before])
        for g in np.unique(gpus).tolist():
            key = (job, int(g))
            self.memory_base[key] = self.memory_base.get(key, 0) + int(delta[gpus == g].sum())

    def columns(self) -> dict[str, np.ndarray]:
        out = _take(self._parts)
        for c in _IDS:  # one column at a time: the wide one is dropped as it narrows
            out[c] = _smallest(out[c])
        n = out["kind"].shape[0]
        for c, value in _UNLINKED.items():
            if out[c].shape[0] != n:  # not looked for: one read-only value, no memory
                out[c] = np.broadcast_to(np.int64(value), (n,))
        return out

    def host_columns(self) -> dict[str, np.ndarray]:
        """The host table whole; rows added from now on start another."""
        taken = _take(self._host)
        self._host = {c: [] for c in HOST_COLUMNS}
        self._host_rows = 0
        return taken


# Columns held narrower when every value fits (CUPTI's uint32 ids, its small enums): the
# GPU table is what summaries hold whole (16.6M records at 100M stored).
_NARROW: dict[str, type] = {
    "stream": np.uint32, "correlation": np.uint32, "copy_kind": np.int8,
    "src_kind": np.int8, "dst_kind": np.int8, "sync_type": np.int8,
}  # fmt: skip


# Index columns of the GPU table, held in the smallest signed type their values fit
# (jobs, processes, GPUs and CUDA ordinals are few; names a few hundred): 14 B less per
# record than int32 ids. Readers that combine them into keys cast to int64 first.
_IDS = ("job", "process", "gpu", "device", "name")


def _smallest(values: np.ndarray) -> np.ndarray:
    """``values`` as int8, int16 or int32, the first that holds them all."""
    if not values.shape[0]:
        return values.astype(np.int8)
    low, top = int(values.min()), int(values.max())
    for dtype in (np.int8, np.int16, np.int32):
        info = np.iinfo(dtype)
        if info.min <= low and top <= info.max:
            return values.astype(dtype, copy=False)
    return values


def _narrow(values: np.ndarray, dtype: type | None) -> np.ndarray:
    """``values`` as ``dtype`` when each fits in it, else as they are (parts that do not
    fit make ``np.concatenate`` widen the whole column)."""
    if dtype is None or not values.shape[0] or values.dtype == dtype:
        return values
    info = np.iinfo(dtype)
    if int(values.min()) < info.min or int(values.max()) > info.max:
        return values
    return values.astype(dtype)


def _take(parts: dict[str, list[np.ndarray]]) -> dict[str, np.ndarray]:
    """Each column whole; a column's parts are dropped as soon as it is joined, so the
    table is never held twice."""
    out = {}
    for c in list(parts):
        out[c] = _concat(parts.pop(c), np.int8 if c == "kind" else np.int64)
    return out


_HOST_KINDS = np.array([int(k) for k in HOST_KINDS])
_LAUNCH_COLUMNS = (
    "kind", "start_ns", "duration_ns", "name", "category", "thread", "correlation",
    "external_id", "device", "stream",
)  # fmt: skip


# The link columns of GPU records left unlinked: no call, no op, no latency, no queue.
_UNLINKED = {"api": -1, "op": -1, "latency": 0, "queue": -1}


def _concat(parts: list[np.ndarray], dtype: type) -> np.ndarray:
    if not parts:
        return np.zeros(0, dtype=dtype)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def gpu_busy(rs: RecordSet) -> Merged:
    """Busy intervals of each physical GPU: the union of its kernels, copies, memsets."""
    on_gpu = np.flatnonzero(rs.mask(*GPU_KINDS))
    return merge_intervals(rs.gpu, rs.start, rs.end, len(rs.gpus), rows=on_gpu)
