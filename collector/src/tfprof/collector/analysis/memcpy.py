"""The ``memcpy`` view: per copy kind (HtoD, DtoH, DtoD, PtoP ...) and memory kinds
(pageable, pinned, device ...): volume, time, achieved bandwidth, and how much of the
copy time ran while a kernel was running on the same GPU (overlapped with compute).

``MemcpyNeed`` reads it through the read engine (sums from SQL, the overlap from a
sweep)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tfprof.collector.analysis.units import pct, us
from tfprof.collector.read.gpu_sweeps import CopyCover
from tfprof.collector.read.needs import Got, Query, Sweep
from tfprof.core.cupti_labels import COPY_KINDS, MEMORY_KINDS

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
