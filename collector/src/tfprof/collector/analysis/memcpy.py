"""The ``memcpy`` view: per copy kind (HtoD, DtoH, DtoD, PtoP ...) and memory kinds
(pageable, pinned, device ...): volume, time, achieved bandwidth, and how much of the
copy time ran while a kernel was running on the same GPU (overlapped with compute).

``MemcpyNeed`` reads it through the read engine (sums from SQL, the overlap from a
sweep); ``memcpy_rows`` computes the same over a ``RecordSet`` until that goes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tfprof.collector.analysis.intervals import covered, group_keys, merge_intervals
from tfprof.collector.analysis.record_set import RecordSet
from tfprof.collector.analysis.units import pct, us
from tfprof.collector.read.gpu_sweeps import CopyCover
from tfprof.collector.read.needs import Got, Query, Sweep
from tfprof.core.cupti_labels import COPY_KINDS, MEMORY_KINDS
from tfprof.core.records import RecordKind

NAME_FIELD = "copy"
TIME_FIELD = "total_us"


@dataclass(frozen=True)
class MemcpyRow:
    copy: str  # "HtoD pageable->device"
    kind: str
    src: str
    dst: str
    count: int
    bytes: int
    total_us: float
    gbps: float  # bytes over total copy time (GB/s, 1e9 bytes per second)
    overlapped_pct: float  # of total_us, with a kernel running on the same GPU


_SUMS = Query("""
SELECT copy_kind, src_kind, dst_kind, count(*), sum(bytes), sum(d)
FROM {g} WHERE kind = 2 GROUP BY ALL""")


@dataclass(frozen=True)
class MemcpyNeed:
    def queries(self) -> Sequence[Query]:
        return (_SUMS,)

    def sweeps(self) -> Sequence[Sweep[Any]]:
        return (CopyCover(),)

    def build(self, got: Got) -> list[MemcpyRow]:
        overlapped = got.swept(CopyCover())
        rows = []
        for kind_id, src_id, dst_id, n, nbytes, total in got.rows(_SUMS):
            over = overlapped.get((kind_id, src_id, dst_id), 0)
            kind = COPY_KINDS.label(kind_id)
            src, dst = MEMORY_KINDS.label(src_id), MEMORY_KINDS.label(dst_id)
            total, nbytes = int(total), int(nbytes)
            rows.append(
                MemcpyRow(
                    copy=f"{kind} {src}->{dst}",
                    kind=kind,
                    src=src,
                    dst=dst,
                    count=int(n),
                    bytes=round(float(nbytes)),
                    total_us=us(total),
                    gbps=round(float(nbytes) / float(total), 3) if total else 0.0,
                    overlapped_pct=pct(over, total),
                )
            )
        rows.sort(key=lambda r: (-r.total_us, r.copy))
        return rows


def copy_overlap_ns(rs: RecordSet, copies: np.ndarray) -> np.ndarray:
    """For each copy (row indices), the time a kernel ran on the same GPU meanwhile."""
    k = rs.mask(RecordKind.KERNEL)
    kernels = merge_intervals(rs.gpu[k], rs.start[k], rs.end[k], len(rs.gpus))
    return covered(kernels, rs.gpu[copies], rs.start[copies], rs.end[copies])


def memcpy_rows(rs: RecordSet) -> list[MemcpyRow]:
    copies = np.flatnonzero(rs.mask(RecordKind.MEMCPY))
    inverse, keys = group_keys(rs.copy_kind[copies], rs.src_kind[copies], rs.dst_kind[copies])
    groups = keys.shape[0]
    dur = rs.duration[copies]
    overlap = copy_overlap_ns(rs, copies)
    count = np.bincount(inverse, minlength=groups)
    nbytes = np.bincount(inverse, weights=rs.bytes[copies], minlength=groups)
    total = np.bincount(inverse, weights=dur, minlength=groups)
    over = np.bincount(inverse, weights=overlap, minlength=groups)
    rows = []
    for i in range(groups):
        kind = COPY_KINDS.label(int(keys[i, 0]))
        src = MEMORY_KINDS.label(int(keys[i, 1]))
        dst = MEMORY_KINDS.label(int(keys[i, 2]))
        rows.append(
            MemcpyRow(
                copy=f"{kind} {src}->{dst}",
                kind=kind,
                src=src,
                dst=dst,
                count=int(count[i]),
                bytes=round(float(nbytes[i])),
                total_us=us(total[i]),
                gbps=round(float(nbytes[i]) / float(total[i]), 3) if total[i] else 0.0,
                overlapped_pct=pct(over[i], total[i]),
            )
        )
    rows.sort(key=lambda r: (-r.total_us, r.copy))
    return rows
