"""The record window every analysis starts from: one columnar table over all jobs.

``prepare`` shifts each stream's record times onto the collector clock (its
``record_shift_ns``), keeps the records that overlap the analysis window and clips them
to it, interns names once for all streams, and tags every record with its job, its
process and its physical GPU (by UUID: CUDA ordinals are per process). The columns are
numpy arrays with one value per record; nothing here makes a Python object per record.

The interval helpers below work on records grouped by an integer key (a GPU, a stream,
a job on a GPU): union of intervals ("busy"), the part of other intervals they cover
(copies overlapped by kernels) and the gaps between them (idle).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tfprof.collector.analysis.errors import AnalysisError
from tfprof.collector.model import JobData, StreamData
from tfprof.core.records import RecordKind

# Kinds that occupy the GPU; SYNC records are host waits and never count as busy.
GPU_KINDS = (RecordKind.KERNEL, RecordKind.MEMCPY, RecordKind.MEMSET)


@dataclass(frozen=True)
class JobRef:
    label: str  # the job name, or name.run_id when several runs share a name
    name: str
    run_id: str
    processes: int
    dropped: int


@dataclass(frozen=True)
class ProcessRef:
    job: int  # index into RecordSet.jobs
    task: str
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
        return self.end - self.start

    def mask(self, *kinds: int) -> np.ndarray:
        if len(kinds) == 1:
            return self.kind == kinds[0]
        return np.isin(self.kind, np.array(kinds, dtype=self.kind.dtype))


_COLUMNS = ("device", "stream", "bytes", "copy_kind", "src_kind", "dst_kind", "sync_type")


def job_labels(jobs: Sequence[JobData]) -> list[str]:
    """The job name, or ``name.run_id`` where runs share a name (as merge labels them)."""
    runs: dict[str, set[str]] = {}
    for job in jobs:
        runs.setdefault(job.name, set()).add(job.run_id)
    return [f"{j.name}.{j.run_id}" if len(runs[j.name]) > 1 else j.name for j in jobs]


def prepare(
    jobs: Sequence[JobData], since_ns: int | None = None, until_ns: int | None = None
) -> RecordSet:
    """All records of ``jobs`` overlapping ``[since_ns, until_ns)``, clipped to it.

    Without bounds the window runs from the first record's start to the last one's end.
    """
    if since_ns is not None and until_ns is not None and since_ns >= until_ns:
        raise AnalysisError(f"the window is empty: since {since_ns} >= until {until_ns} (ns)")
    labels = job_labels(jobs)
    job_refs: list[JobRef] = []
    processes: list[ProcessRef] = []
    gpu_index: dict[str, int] = {}
    gpus: list[GpuRef] = []
    name_index: dict[str, int] = {"": 0}
    parts: dict[str, list[np.ndarray]] = {
        c: [] for c in ("kind", "start", "end", "job", "process", "gpu", "name", *_COLUMNS)
    }
    for j, (job, label) in enumerate(zip(jobs, labels, strict=True)):
        job_refs.append(JobRef(label, job.name, job.run_id, len(job.streams), job.dropped.total))
        for stream in job.streams:
            p = len(processes)
            processes.append(ProcessRef(j, stream.task, stream.host, stream.pid))
            rec = stream.records
            n = int(rec["kind"].shape[0])
            if n == 0:
                continue
            start = rec["start_ns"] + np.int64(stream.record_shift_ns)
            end = start + np.maximum(rec["duration_ns"], 0)
            keep: np.ndarray | None = None
            fraction: np.ndarray | None = None
            if since_ns is not None or until_ns is not None:
                inside = np.ones(n, dtype=bool)
                if since_ns is not None:
                    inside &= end > since_ns
                if until_ns is not None:
                    inside &= start < until_ns
                if not inside.all():
                    keep = np.flatnonzero(inside)
                    start, end = start[keep], end[keep]
                whole = end - start
                if since_ns is not None:
                    np.maximum(start, since_ns, out=start)
                    np.maximum(end, since_ns, out=end)
                if until_ns is not None:
                    np.minimum(end, until_ns, out=end)
                # A clipped copy keeps the share of its bytes that fits its clipped time,
                # so rates (bytes / time) stay the copy's own.
                cut = (end - start) < whole  # whole > 0 wherever this holds
                if cut.any():
                    fraction = np.where(cut, (end - start) / np.maximum(whole, 1), 1.0)
            m = int(start.shape[0])
            if m == 0:
                continue

            def col(
                name: str, rec: dict[str, np.ndarray] = rec, keep: np.ndarray | None = keep
            ) -> np.ndarray:
                values = rec[name]
                return values if keep is None else values[keep]

            parts["kind"].append(col("kind").astype(np.int8))
            parts["start"].append(start)
            parts["end"].append(end)
            parts["job"].append(np.full(m, j, dtype=np.int32))
            parts["process"].append(np.full(m, p, dtype=np.int32))
            device = col("device")
            parts["gpu"].append(_gpu_ids(stream, device, gpu_index, gpus))
            parts["name"].append(_name_ids(stream.strings, col("name"), name_index))
            for c in _COLUMNS:
                if c == "device":
                    parts[c].append(device)
                elif c == "bytes" and fraction is not None:
                    parts[c].append(np.rint(col(c) * fraction).astype(np.int64))
                else:
                    parts[c].append(col(c))
    columns = {c: _concat(v, np.int8 if c == "kind" else np.int64) for c, v in parts.items()}
    starts, ends = columns["start"], columns["end"]
    lo = since_ns if since_ns is not None else (int(starts.min()) if starts.shape[0] else 0)
    hi = until_ns if until_ns is not None else (int(ends.max()) if ends.shape[0] else lo)
    names = [""] * len(name_index)
    for text, i in name_index.items():
        names[i] = text
    return RecordSet(
        jobs=tuple(job_refs),
        processes=tuple(processes),
        gpus=tuple(gpus),
        names=tuple(names),
        start_ns=lo,
        end_ns=hi,
        **columns,
    )


def _concat(parts: list[np.ndarray], dtype: type) -> np.ndarray:
    if not parts:
        return np.zeros(0, dtype=dtype)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _small_unique(values: np.ndarray) -> np.ndarray:
    """Distinct values of a column of small non-negative ids (bincount, not a sort)."""
    if values.shape[0] and int(values.min()) >= 0 and int(values.max()) < (1 << 20):
        return np.flatnonzero(np.bincount(values))
    return np.unique(values)


def _gpu_ids(
    stream: StreamData, device: np.ndarray, index: dict[str, int], gpus: list[GpuRef]
) -> np.ndarray:
    ordinals = _small_unique(device)
    table: dict[int, int] = {}
    for o in ordinals.tolist():
        uuid = stream.device_uuid(int(o))
        if uuid not in index:
            meta = stream.devices.get(int(o))
            index[uuid] = len(gpus)
            gpus.append(GpuRef(uuid, meta.name if meta else ""))
        table[int(o)] = index[uuid]
    if len(table) == 1:
        return np.full(device.shape[0], next(iter(table.values())), dtype=np.int32)
    keys = np.array(sorted(table), dtype=np.int64)
    values = np.array([table[k] for k in keys.tolist()], dtype=np.int32)
    return values[np.searchsorted(keys, device)]


def _name_ids(strings: list[str], name: np.ndarray, index: dict[str, int]) -> np.ndarray:
    n = len(strings)
    valid = (name > 0) & (name < n)
    idx = np.where(valid, name, 0)
    table = np.zeros(max(n, 1), dtype=np.int32)
    for i in _small_unique(idx).tolist():
        if i:
            table[i] = index.setdefault(strings[i], len(index))
    return table[idx]


# -- intervals --------------------------------------------------------------------------


@dataclass(frozen=True)
class Merged:
    """Disjoint busy intervals per group, sorted by (group, start)."""

    group: np.ndarray
    start: np.ndarray
    end: np.ndarray
    busy: np.ndarray  # per group: total length (ns), int64
    num_groups: int

    @property
    def length(self) -> np.ndarray:
        return self.end - self.start


def _keys(group: np.ndarray, times: np.ndarray, origin: int, span: int) -> np.ndarray:
    return group.astype(np.int64) * np.int64(span) + (times - np.int64(origin))


def _span(num_groups: int, start: np.ndarray, end: np.ndarray) -> tuple[int, int]:
    origin = int(start.min())
    span = int(end.max()) - origin + 1
    if num_groups * span >= (1 << 62):
        raise AnalysisError(
            f"time span {span} ns over {num_groups} groups is too large to analyse at once; "
            "narrow it with --since/--until"
        )
    return origin, span


def merge_intervals(
    group: np.ndarray, start: np.ndarray, end: np.ndarray, num_groups: int
) -> Merged:
    """The union of ``[start, end)`` per group. Touching intervals merge."""
    if start.shape[0] == 0:
        empty = np.zeros(0, dtype=np.int64)
        return Merged(empty, empty, empty, np.zeros(num_groups, dtype=np.int64), num_groups)
    origin, span = _span(num_groups, start, end)
    # Groups occupy disjoint key ranges, so one running maximum serves all of them.
    ks, ke = _keys(group, start, origin, span), _keys(group, end, origin, span)
    order = np.argsort(ks, kind="stable")
    ks, ke = ks[order], ke[order]
    reach = np.maximum.accumulate(ke)
    first = np.empty(ks.shape[0], dtype=bool)
    first[0] = True
    np.greater(ks[1:], reach[:-1], out=first[1:])
    heads = np.flatnonzero(first)
    m_start = ks[heads]
    m_end = reach[np.append(heads[1:] - 1, ks.shape[0] - 1)]
    m_group = m_start // span
    busy = np.bincount(m_group, weights=m_end - m_start, minlength=num_groups)
    back = m_group * span - origin
    return Merged(m_group, m_start - back, m_end - back, np.rint(busy).astype(np.int64), num_groups)


def covered(merged: Merged, group: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """For each ``[start, end)`` of ``group``, how much of it ``merged`` covers (ns)."""
    if start.shape[0] == 0 or merged.start.shape[0] == 0:
        return np.zeros(start.shape[0], dtype=np.int64)
    lo = min(int(merged.start.min()), int(start.min()))
    hi = max(int(merged.end.max()), int(end.max()))
    groups = max(merged.num_groups, int(group.max()) + 1)
    origin, span = _span(groups, np.array([lo]), np.array([hi]))
    ms = _keys(merged.group, merged.start, origin, span)
    me = _keys(merged.group, merged.end, origin, span)
    before = np.concatenate(([0], np.cumsum(me - ms)))

    def coverage_until(t: np.ndarray) -> np.ndarray:
        k = np.searchsorted(ms, t, side="right") - 1
        inside = np.clip(t - ms[np.maximum(k, 0)], 0, (me - ms)[np.maximum(k, 0)])
        return np.where(k >= 0, before[np.maximum(k, 0)] + inside, 0)

    return coverage_until(_keys(group, end, origin, span)) - coverage_until(
        _keys(group, start, origin, span)
    )


@dataclass(frozen=True)
class Gaps:
    group: np.ndarray
    start: np.ndarray
    end: np.ndarray

    @property
    def length(self) -> np.ndarray:
        return self.end - self.start


def gaps(merged: Merged, lo: np.ndarray, hi: np.ndarray) -> Gaps:
    """Idle gaps per group inside ``[lo[g], hi[g])``: before the first busy interval,
    between busy intervals, after the last. A group with no interval is one gap."""
    g, s, e = merged.group, merged.start, merged.end
    n = merged.num_groups
    same = g[1:] == g[:-1]
    inner = np.flatnonzero(same)
    parts_g = [g[inner]]
    parts_s = [e[inner]]
    parts_e = [s[inner + 1]]
    if g.shape[0]:
        heads = np.flatnonzero(np.concatenate(([True], ~same)))
        tails = np.flatnonzero(np.concatenate((~same, [True])))
        parts_g += [g[heads], g[tails]]
        parts_s += [lo[g[heads]], e[tails]]
        parts_e += [s[heads], hi[g[tails]]]
    used = np.zeros(n, dtype=bool)
    used[g] = True
    idle = np.flatnonzero(~used)
    parts_g.append(idle)
    parts_s.append(lo[idle])
    parts_e.append(hi[idle])
    gg, gs, ge = (np.concatenate(p).astype(np.int64) for p in (parts_g, parts_s, parts_e))
    keep = ge > gs
    return Gaps(gg[keep], gs[keep], ge[keep])


def group_keys(*columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dense group ids for combinations of non-negative integer columns, and the
    distinct combinations (one row per group, columns side by side), in key order."""
    n = columns[0].shape[0]
    if not n:
        return np.zeros(0, dtype=np.int64), np.zeros((0, len(columns)), dtype=np.int64)
    lows = [int(c.min()) for c in columns]
    radices = [int(c.max()) - low + 1 for c, low in zip(columns, lows, strict=True)]
    if min(lows) < 0 or float(np.prod(np.array(radices, dtype=np.float64))) >= 2.0**62:
        stacked = np.stack([c.astype(np.int64) for c in columns], axis=1)
        distinct, inverse = np.unique(stacked, axis=0, return_inverse=True)
        return inverse.reshape(-1), distinct
    key = np.zeros(n, dtype=np.int64)
    for c, low, radix in zip(columns, lows, radices, strict=True):
        key *= radix
        key += c.astype(np.int64) - low
    total = int(np.prod(np.array(radices, dtype=np.int64)))
    if total <= 1 << 24:  # few combinations: a table, no sort
        used = np.bincount(key, minlength=total) > 0
        dense = np.cumsum(used) - 1
        distinct_keys = np.flatnonzero(used)
        inverse = dense[key]
    else:
        distinct_keys, inverse = np.unique(key, return_inverse=True)
    rows = np.zeros((distinct_keys.shape[0], len(columns)), dtype=np.int64)
    rest = distinct_keys.copy()
    for i in range(len(columns) - 1, -1, -1):
        rows[:, i] = rest % radices[i] + lows[i]
        rest //= radices[i]
    return inverse.astype(np.int64), rows


def gpu_busy(rs: RecordSet) -> Merged:
    """Busy intervals of each physical GPU: the union of its kernels, copies, memsets."""
    on_gpu = rs.mask(*GPU_KINDS)
    return merge_intervals(rs.gpu[on_gpu], rs.start[on_gpu], rs.end[on_gpu], len(rs.gpus))


def us(ns: float | int | np.ndarray) -> float:
    """Nanoseconds as microseconds, rounded to the nanosecond."""
    return round(float(ns) / 1000.0, 3)


def pct(part: float | int, whole: float | int) -> float:
    return round(100.0 * float(part) / float(whole), 2) if whole else 0.0
