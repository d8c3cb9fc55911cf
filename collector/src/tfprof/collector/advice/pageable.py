"""Copies from or to pageable host memory: the driver stages them through a pinned
bounce buffer, synchronously, at a fraction of the bandwidth of pinned copies."""

from __future__ import annotations

import numpy as np

from tfprof.collector.advice.base import Context, Finding, us
from tfprof.core.records import RecordKind

NAME = "pageable-memory"
PAGEABLE = 1  # CUpti_ActivityMemoryKind
MIN_TIME_NS = 100_000  # ignore a handful of tiny copies


def check(ctx: Context) -> list[Finding]:
    rs = ctx.rs
    is_copy = rs.kind == RecordKind.MEMCPY
    pageable = np.flatnonzero(is_copy & ((rs.src_kind == PAGEABLE) | (rs.dst_kind == PAGEABLE)))
    findings = []
    for j in np.unique(rs.job[pageable]).tolist():
        rows = pageable[rs.job[pageable] == j]
        total = int(rs.duration[rows].sum())
        if total < MIN_TIME_NS:
            continue
        nbytes = int(rs.bytes[rows].sum())
        directions = {
            name: int(np.count_nonzero(rs.copy_kind[rows] == k))
            for k, name in ((1, "HtoD"), (2, "DtoH"))
        }
        job = rs.jobs[j].label
        findings.append(
            Finding(
                rule=NAME,
                title=f"job {job}: {rows.shape[0]:,} copies use pageable host memory "
                f"({us(total):,.0f} us)",
                impact_us=us(total),
                evidence={
                    "copies": int(rows.shape[0]),
                    "bytes": nbytes,
                    "copy_us": us(total),
                    "gbps": round(nbytes / total, 3) if total else 0.0,
                    **directions,
                },
                suggestion=(
                    "Use pinned (page-locked) host memory for transfers: DataLoader "
                    "pin_memory=True / tensor.pin_memory(), cudaHostAlloc or "
                    "cudaHostRegister for your own buffers; TensorFlow stages through "
                    "pinned memory when input is prefetched to the GPU "
                    "(tf.data.experimental.prefetch_to_device)."
                ),
                start_ns=int(rs.start[rows].min()),
                end_ns=int(rs.end[rows].max()),
                jobs=(job,),
                streams=ctx.tracks_of(rows),
            )
        )
    return findings
