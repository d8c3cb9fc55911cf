"""The ``memory`` view: device memory per job and physical GPU from MEMORY records (CUPTI
MEMORY2, Kineto ``[memory]``): the peak (all the job's processes summed, as the trace
metadata's ``memory_peak_bytes``), when it happened, how close it came to the GPU's
memory, and a coarse timeline.

Memory allocated before tracing began is not seen; allocations before ``--since`` are
(the level at the window's start comes from every record before it).

``MemoryNeed`` reads it through the read engine (``read.device_memory``: one sweep over
the memory records); ``memory_rows`` computes it over a ``RecordSet`` (trace files).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tfprof.collector.analysis.record_set import RecordSet
from tfprof.collector.analysis.units import pct
from tfprof.collector.analysis.view_rows import ViewRows
from tfprof.collector.read.device_memory import Level, MemoryLevels
from tfprof.collector.read.engine import Read
from tfprof.collector.read.needs import Got, Query, Sweep
from tfprof.collector.timeline.memory_levels import MEMORY_ALLOCATION, MEMORY_RELEASE, memory_deltas
from tfprof.core.records import RecordKind

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


def memory_rows(rs: RecordSet, points: int = TIMELINE_POINTS) -> list[MemoryRow]:
    h = rs.host
    memory = np.flatnonzero(h.kind == RecordKind.MEMORY)
    base = {(j, g): b for j, g, b in rs.memory_base}
    keys = {(int(j), int(g)) for j, g in zip(h.job[memory], h.gpu[memory], strict=True)}
    rows = []
    for j, g in sorted(keys | set(base)):
        mine = memory[(h.job[memory] == j) & (h.gpu[memory] == g)]
        mine = mine[np.argsort(h.start[mine], kind="stable")]
        start = base.get((j, g), 0)
        time = h.start[mine]
        level = start + np.cumsum(memory_deltas(h.kind[mine], h.memory_op[mine], h.bytes[mine]))
        peak, peak_at = start, rs.start_ns
        if level.shape[0] and int(level.max()) > start:
            top = int(np.argmax(level))
            peak, peak_at = int(level[top]), int(time[top])
        gpu = rs.memory_gpus[g]
        op = h.memory_op[mine]
        rows.append(
            MemoryRow(
                job=rs.jobs[j].label,
                gpu=gpu.uuid,
                gpu_name=gpu.name,
                peak_bytes=peak,
                peak_offset_s=round((peak_at - rs.start_ns) / 1e9, 6),
                capacity_bytes=gpu.memory_bytes,
                peak_pct=pct(peak, gpu.memory_bytes),
                allocations=int(np.count_nonzero(op == MEMORY_ALLOCATION)),
                releases=int(np.count_nonzero(op == MEMORY_RELEASE)),
                start_bytes=start,
                end_bytes=int(level[-1]) if level.shape[0] else start,
                timeline=_timeline(time, level, start, rs.start_ns, rs.end_ns, points),
            )
        )
    rows.sort(key=lambda r: (-r.peak_bytes, r.job, r.gpu))
    return rows


def _timeline(
    time: np.ndarray, level: np.ndarray, start: int, lo: int, hi: int, points: int
) -> list[MemoryPoint]:
    """The highest level in each of ``points`` equal slices of ``[lo, hi)``."""
    out = []
    span = max(hi - lo, 1)
    for i in range(points):
        t0, t1 = lo + span * i // points, lo + span * (i + 1) // points
        before = int(np.searchsorted(time, t0, side="right"))  # level at t0: last event <= t0
        last = i == points - 1  # the last slice holds the window's end instant too
        inside = int(np.searchsorted(time, t1, side="right" if last else "left"))
        held = int(level[before - 1]) if before else start
        high = max(held, int(level[before:inside].max())) if inside > before else held
        out.append(MemoryPoint(round((t0 - lo) / 1e9, 6), high))
    return out


def memory_notes(rs: RecordSet) -> tuple[str, ...]:
    if (rs.host.kind == RecordKind.MEMORY).any() or rs.memory_base:
        return ()
    return (NO_MEMORY,)
