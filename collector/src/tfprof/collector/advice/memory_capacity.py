"""Device memory near capacity: a job's peak device memory on a GPU (MEMORY records, its
processes summed) against the GPU's memory (DeviceMeta.memory_bytes). Close to the top,
a larger batch or a fragmenting allocator ends in out-of-memory errors or allocator
retries (cudaFree/cudaMalloc in the step)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tfprof.collector.advice.base import Finding
from tfprof.collector.analysis.memory_view import level_rows
from tfprof.collector.read.device_memory import MemoryLevels
from tfprof.collector.read.needs import Got, Query, Sweep

NAME = "memory-capacity"
NEAR = 0.90  # peak at 90% of the GPU's memory or more


@dataclass(frozen=True)
class MemoryCapacity:
    name: str = NAME

    def queries(self) -> Sequence[Query]:
        return ()

    def sweeps(self) -> Sequence[Sweep[Any]]:
        return (MemoryLevels(),)

    def build(self, got: Got) -> list[Finding]:
        read = got.read
        findings = []
        for row in level_rows(read, got.swept(MemoryLevels())):
            if not row.capacity_bytes or row.peak_bytes < NEAR * row.capacity_bytes:
                continue
            peak_at = read.start_ns + int(row.peak_offset_s * 1e9)
            findings.append(
                Finding(
                    rule=NAME,
                    title=f"job {row.job}: device memory peaked at "
                    f"{row.peak_bytes / 2**30:,.2f} GiB, {row.peak_pct:.1f}% of GPU {row.gpu}'s "
                    f"{row.capacity_bytes / 2**30:,.2f} GiB",
                    # No time at stake: a risk (out of memory, allocator retries), listed last.
                    impact_us=0.0,
                    evidence={
                        "peak_bytes": row.peak_bytes,
                        "capacity_bytes": row.capacity_bytes,
                        "peak_pct": row.peak_pct,
                        "peak_at_ns": peak_at,
                        "allocations": row.allocations,
                        "releases": row.releases,
                    },
                    suggestion=(
                        "Leave headroom: lower the batch size or use gradient accumulation, "
                        "activation checkpointing or mixed precision; with PyTorch, check "
                        "torch.cuda.memory_summary() for fragmentation "
                        "(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)."
                    ),
                    start_ns=peak_at,
                    end_ns=peak_at,
                    jobs=(row.job,),
                )
            )
        return findings


RULE = MemoryCapacity()
