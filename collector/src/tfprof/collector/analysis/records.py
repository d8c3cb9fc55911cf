"""The record window every analysis starts from: one columnar table over all jobs.

``prepare`` runs the shared preparation step (``tfprof.collector.prepare``: job and task
labels as on the timeline, clock shift, window, name interning), clips the records to
the analysis window, and tags every record with its job, its process and its physical
GPU (by UUID: CUDA ordinals are per process). The columns are numpy arrays with one
value per record; nothing here makes a Python object per record.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from tfprof.collector.analysis.errors import AnalysisError
from tfprof.collector.analysis.intervals import Merged, merge_intervals
from tfprof.collector.model import JobData, StreamData
from tfprof.collector.prepare import (
    NameTable,
    PreparedStream,
    TimeWindow,
    host_samples,
    prepare_jobs,
    small_unique,
)
from tfprof.core.records import RecordKind
from tfprof.core.tracks import TrackKey

# Kinds that occupy the GPU; SYNC records are host waits and never count as busy.
GPU_KINDS = (RecordKind.KERNEL, RecordKind.MEMCPY, RecordKind.MEMSET)


@dataclass(frozen=True)
class HostStats:
    """What a job's host samples (taken by the launcher, GPU or not) say in the window."""

    start_ns: int = 0  # first and last sample; 0 when there is none
    end_ns: int = 0
    samples: int = 0
    cpu_percent_mean: float = 0.0  # each process's mean CPU %, summed over processes
    rss_max_bytes: int = 0  # each process's peak RSS, summed over processes


@dataclass(frozen=True)
class JobRef:
    label: str  # the job name, or name.run_id when several runs share a name
    name: str
    run_id: str
    processes: int
    dropped: int
    sources: tuple[str, ...] = ()  # the processes' record sources (cupti, none, replay:...)
    host: HostStats = HostStats()
    # Unreadable parts of the stored job ("<stream>: <what>") and the records they held
    # (None: unknown), so every view says what it could not count.
    skipped: tuple[str, ...] = ()
    lost_records: int | None = 0


@dataclass(frozen=True)
class ProcessRef:
    job: int  # index into RecordSet.jobs
    task: str  # as the timeline labels it
    host: str
    pid: int


@dataclass(frozen=True)
class GpuRef:
    uuid: str
    name: str


@dataclass(frozen=True)
class RecordSet:
    """Every record of the analysed jobs inside ``[start_ns, end_ns)``, clipped to it.

    ``start``/``end`` are absolute collector-clock nanoseconds. ``job``, ``process`` and
    ``gpu`` index ``jobs``, ``processes`` and ``gpus``; ``name`` indexes ``names``.
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

    def track(self, process: int, device: int, stream: int) -> TrackKey:
        """The timeline track of records of ``process`` on ``device`` and ``stream``."""
        ref = self.processes[process]
        return TrackKey.for_stream(self.jobs[ref.job].label, ref.task, device, stream)


# Record columns passed through as they are (bytes is scaled when a copy is clipped).
_COLUMNS = ("device", "stream", "bytes", "copy_kind", "src_kind", "dst_kind", "sync_type")
_TAGS = ("kind", "start", "end", "job", "process", "gpu", "name")


def _lost_records(job: JobData) -> int | None:
    lost = [s.lost_records for s in job.streams if s.skipped]
    return None if None in lost or job.skipped else sum(n or 0 for n in lost)


def prepare(
    jobs: Sequence[JobData], since_ns: int | None = None, until_ns: int | None = None
) -> RecordSet:
    """All records of ``jobs`` overlapping ``[since_ns, until_ns)``, clipped to it.

    Without bounds the window runs from the first record's start to the last one's end.
    """
    if since_ns is not None and until_ns is not None and since_ns >= until_ns:
        raise AnalysisError(f"the window is empty: since {since_ns} >= until {until_ns} (ns)")
    window = TimeWindow(since_ns, until_ns)
    table = _Table()
    job_refs: list[JobRef] = []
    processes: list[ProcessRef] = []
    for j, prepared in enumerate(prepare_jobs(jobs, window)):
        job = prepared.job
        job_refs.append(
            JobRef(
                prepared.label,
                job.name,
                job.run_id,
                len(job.streams),
                job.dropped.total,
                tuple(sorted({s.source for s in job.streams if s.source})),
                _host_stats(job.streams, window),
                tuple(job.skipped)
                + tuple(f"{s.task}: {w}" for s in job.streams for w in s.skipped),
                _lost_records(job),
            )
        )
        for prep in prepared.streams:
            processes.append(ProcessRef(j, prep.task_label, prep.stream.host, prep.stream.pid))
            table.add(prep, window, j, len(processes) - 1)
    columns = table.columns()
    starts, ends = columns["start"], columns["end"]
    # Without records (no GPU activity) the host samples still span the run.
    sampled = [j.host for j in job_refs if j.host.samples]
    first = min([int(starts.min())] if starts.shape[0] else [h.start_ns for h in sampled] or [0])
    last = max([int(ends.max())] if ends.shape[0] else [h.end_ns for h in sampled] or [first])
    lo = since_ns if since_ns is not None else first
    hi = until_ns if until_ns is not None else max(last, lo)
    return RecordSet(
        jobs=tuple(job_refs),
        processes=tuple(processes),
        gpus=tuple(table.gpus),
        names=table.names.names,
        start_ns=lo,
        end_ns=hi,
        **columns,
    )


def _host_stats(streams: Sequence[StreamData], window: TimeWindow) -> HostStats:
    """Each process's mean CPU % and peak RSS, summed over the job's processes."""
    first, last, count, cpu, rss = None, None, 0, 0.0, 0
    for stream in streams:
        samples = host_samples([stream], window)
        time = samples["time_ns"]
        if not time.shape[0]:
            continue
        first = int(time[0]) if first is None else min(first, int(time[0]))
        last = int(time[-1]) if last is None else max(last, int(time[-1]))
        count += int(time.shape[0])
        cpu += float(samples["cpu_percent"].mean())
        rss += int(samples["rss_bytes"].max())
    if first is None or last is None:
        return HostStats()
    return HostStats(first, last, count, round(cpu, 2), rss)


def _clip(
    start: np.ndarray, end: np.ndarray, window: TimeWindow
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``[start, end)`` clipped to the window, and the share of each record kept (None: all)."""
    if window.is_open:
        return start, end, None
    whole = end - start
    if window.lo is not None:
        start, end = np.maximum(start, window.lo), np.maximum(end, window.lo)
    if window.hi is not None:
        end = np.minimum(end, window.hi)
    # A clipped copy keeps the share of its bytes that fits its clipped time, so rates
    # (bytes / time) stay the copy's own.
    cut = (end - start) < whole  # whole > 0 wherever this holds
    if not cut.any():
        return start, end, None
    return start, end, np.where(cut, (end - start) / np.maximum(whole, 1), 1.0)


class _Table:
    """Collects every stream's clipped, tagged columns; interns names and GPUs."""

    def __init__(self) -> None:
        self.names = NameTable([""])  # id 0: no name
        self.gpus: list[GpuRef] = []
        self._gpu_index: dict[str, int] = {}
        self._parts: dict[str, list[np.ndarray]] = {c: [] for c in (*_TAGS, *_COLUMNS)}

    def add(self, prep: PreparedStream, window: TimeWindow, job: int, process: int) -> None:
        prep = _gpu_activity(prep)
        m = len(prep)
        if m == 0:
            return
        start, end, fraction = _clip(prep.start, prep.end, window)
        parts = self._parts
        parts["kind"].append(prep.column("kind").astype(np.int8))
        parts["start"].append(start)
        parts["end"].append(end)
        parts["job"].append(np.full(m, job, dtype=np.int32))
        parts["process"].append(np.full(m, process, dtype=np.int32))
        device = prep.column("device")
        parts["gpu"].append(self._gpu_ids(prep.stream, device))
        names = self.names.intern_column(prep.stream.strings, prep.column("name"), unnamed=0)
        parts["name"].append(names)
        for c in _COLUMNS:
            values = device if c == "device" else prep.column(c)
            if c == "bytes" and fraction is not None:
                values = np.rint(values * fraction).astype(np.int64)
            parts[c].append(values)

    def columns(self) -> dict[str, np.ndarray]:
        return {c: _concat(v, np.int8 if c == "kind" else np.int64) for c, v in self._parts.items()}

    def _gpu_ids(self, stream: StreamData, device: np.ndarray) -> np.ndarray:
        table: dict[int, int] = {}
        for o in small_unique(device).tolist():
            uuid = stream.device_uuid(o)
            if uuid not in self._gpu_index:
                meta = stream.devices.get(o)
                self._gpu_index[uuid] = len(self.gpus)
                self.gpus.append(GpuRef(uuid, meta.name if meta else ""))
            table[o] = self._gpu_index[uuid]
        if len(table) == 1:
            return np.full(device.shape[0], next(iter(table.values())), dtype=np.int32)
        keys = np.array(sorted(table), dtype=np.int64)
        values = np.array([table[k] for k in keys.tolist()], dtype=np.int32)
        ids: np.ndarray = values[np.searchsorted(keys, device)]
        return ids


def _gpu_activity(prep: PreparedStream) -> PreparedStream:
    """The stream's GPU activity (kernels, copies, memsets, syncs) without its host records
    (API calls, ranges, memory), which the GPU analyses must not count."""
    kind = prep.column("kind")
    gpu = (kind >= RecordKind.KERNEL) & (kind <= RecordKind.SYNC)
    if gpu.all():
        return prep
    idx = np.flatnonzero(gpu)
    return replace(prep, keep=prep.rows(idx), start=prep.start[idx], end=prep.end[idx])


def _concat(parts: list[np.ndarray], dtype: type) -> np.ndarray:
    if not parts:
        return np.zeros(0, dtype=dtype)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def gpu_busy(rs: RecordSet) -> Merged:
    """Busy intervals of each physical GPU: the union of its kernels, copies, memsets."""
    on_gpu = rs.mask(*GPU_KINDS)
    return merge_intervals(rs.gpu[on_gpu], rs.start[on_gpu], rs.end[on_gpu], len(rs.gpus))
