"""Copies from or to pageable host memory: the driver stages them through a pinned
bounce buffer, synchronously, at a fraction of the bandwidth of pinned copies."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tfprof.collector.advice.base import Finding, tracks, tracks_query, us
from tfprof.collector.read.needs import Got, Query, Sweep

NAME = "pageable-memory"
PAGEABLE = 1  # CUpti_ActivityMemoryKind
MIN_TIME_NS = 100_000  # ignore a handful of tiny copies
_PAGEABLE = f"kind = 2 AND (src_kind = {PAGEABLE} OR dst_kind = {PAGEABLE})"
# Per job: copies from or to pageable memory, their time, bytes, per direction, first, last.
COPIES = Query(
    "SELECT job, count(*), sum(d), sum(bytes), count(*) FILTER (WHERE copy_kind = 1), "
    f"count(*) FILTER (WHERE copy_kind = 2), min(s), max(e) FROM {{g}} WHERE {_PAGEABLE} "
    "GROUP BY job"
)
TRACKS = tracks_query(_PAGEABLE, "job")


@dataclass(frozen=True)
class Pageable:
    name: str = NAME

    def queries(self) -> Sequence[Query]:
        return (COPIES, TRACKS)

    def sweeps(self) -> Sequence[Sweep[Any]]:
        return ()

    def build(self, got: Got) -> list[Finding]:
        read = got.read
        shown = tracks(read, got.rows(TRACKS))
        findings = []
        for j, n, total, nbytes, htod, dtoh, first, last in sorted(got.rows(COPIES)):
            total, nbytes = int(total), int(nbytes)
            if total < MIN_TIME_NS:
                continue
            job = read.jobs[j].label
            findings.append(
                Finding(
                    rule=NAME,
                    title=f"job {job}: {int(n):,} copies use pageable host memory "
                    f"({us(total):,.0f} us)",
                    impact_us=us(total),
                    evidence={
                        "copies": int(n),
                        "bytes": nbytes,
                        "copy_us": us(total),
                        "gbps": round(nbytes / total, 3) if total else 0.0,
                        "HtoD": int(htod),
                        "DtoH": int(dtoh),
                    },
                    suggestion=(
                        "Use pinned (page-locked) host memory for transfers: DataLoader "
                        "pin_memory=True / tensor.pin_memory(), cudaHostAlloc or "
                        "cudaHostRegister for your own buffers; TensorFlow stages through "
                        "pinned memory when input is prefetched to the GPU "
                        "(tf.data.experimental.prefetch_to_device)."
                    ),
                    start_ns=int(first),
                    end_ns=int(last),
                    jobs=(job,),
                    streams=shown[j],
                )
            )
        return findings


RULE = Pageable()
