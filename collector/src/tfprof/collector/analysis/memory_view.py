"""The ``memory`` view: device memory per job and physical GPU from MEMORY records (CUPTI
MEMORY2, Kineto ``[memory]``): the peak (all the job's processes summed, as the trace
metadata's ``memory_peak_bytes``), when it happened, how close it came to the GPU's
memory, and a coarse timeline.

Memory allocated before tracing began is not seen; allocations before ``--since`` are
(the level at the window's start comes from every record before it).

``MemoryNeed`` reads it through the read engine (``read.device_memory``: one sweep over
the memory records).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tfprof.collector.analysis.units import pct
from tfprof.collector.analysis.view_rows import ViewRows
from tfprof.collector.read.device_memory import Level, MemoryLevels
from tfprof.collector.read.engine import Read
from tfprof.collector.read.needs import Got, Query, Sweep

NAME_FIELD = "job"
TIME_FIELD = ""  # no time field: --min-micros does not apply
TIMELINE_POINTS = 8
NO_MEMORY = "no device memory records: the trace has none, or --memory was off"


@dataclass(frozen=True)
class MemoryPoint:
    offset_s: float  # start of the slice of the window, seconds from the window start
    bytes: int  # the highest level during that slice

    def __str__(self) -> str:
        return f"+{self.offset_s:.3g}s {self.bytes / 2**20:,.1f} MiB"


@dataclass(frozen=True)
class MemoryRow:
    job: str
    gpu: str  # UUID
    gpu_name: str
    peak_bytes: int
    peak_offset_s: float  # when the peak was first reached, from the window start
    capacity_bytes: int  # the GPU's memory, 0 when the trace does not say
    peak_pct: float  # of capacity; 0 when unknown
    allocations: int
    releases: int
    start_bytes: int  # held when the window began (records before it)
    end_bytes: int  # held when it ended
    timeline: list[MemoryPoint] = field(default_factory=list)  # TIMELINE_POINTS slices


def level_rows(read: Read, levels: Sequence[Level]) -> list[MemoryRow]:
    """The view's rows of ``read.device_memory``'s levels."""
    lo, hi = read.start_ns, read.end_ns
    points = len(levels[0].timeline) if levels else 0
    span = max(hi - lo, 1)
    rows = [
        MemoryRow(
            job=read.jobs[v.job].label,
            gpu=v.gpu.uuid,
            gpu_name=v.gpu.name,
            peak_bytes=v.peak,
            peak_offset_s=round((v.peak_at - lo) / 1e9, 6),
            capacity_bytes=v.gpu.memory_bytes,
            peak_pct=pct(v.peak, v.gpu.memory_bytes),
            allocations=v.allocations,
            releases=v.releases,
            start_bytes=v.start,
            end_bytes=v.level,
            timeline=[
                MemoryPoint(round((span * i // points) / 1e9, 6), high)
                for i, high in enumerate(v.timeline)
            ],
        )
        for v in levels
    ]
    rows.sort(key=lambda r: (-r.peak_bytes, r.job, r.gpu))
    return rows


@dataclass(frozen=True)
class MemoryNeed:
    points: int = TIMELINE_POINTS

    def queries(self) -> Sequence[Query]:
        return ()

    def sweeps(self) -> Sequence[Sweep[Any]]:
        return (MemoryLevels(self.points),)

    def build(self, got: Got) -> ViewRows:
        levels = got.swept(MemoryLevels(self.points))
        return ViewRows(level_rows(got.read, levels), () if levels else (NO_MEMORY,))
