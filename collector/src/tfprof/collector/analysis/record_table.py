"""The table ``records.prepare`` fills (``RecordTable``): every stream's clipped, tagged
columns, GPU activity and host records apart, with names and physical GPUs interned;
each GPU record linked to the API call that launched it. Columns are held in the
narrowest type their values fit.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tfprof.collector.analysis.clipped_rows import clip_to_window
from tfprof.collector.analysis.host_records import HOST_COLUMNS, HOST_KINDS, launches
from tfprof.collector.jobdata import StreamData
from tfprof.collector.read.refs import GpuRef
from tfprof.collector.timeline.memory_levels import memory_deltas
from tfprof.collector.timeline.prepare import (
    NameTable,
    PreparedStream,
    TimeWindow,
    rows_of,
    small_unique,
)
from tfprof.core.records import RecordKind

# Record columns passed through as they are (bytes is scaled when a copy is clipped).
_COLUMNS = (
    "device", "stream", "bytes", "copy_kind", "src_kind", "dst_kind", "sync_type", "correlation",
)  # fmt: skip
_TAGS = ("kind", "start", "end", "job", "process", "gpu", "name")
_LINKS = ("api", "op", "latency", "queue")


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


class RecordTable:
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
