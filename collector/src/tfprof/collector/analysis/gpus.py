"""The ``gpus`` view: per physical GPU (UUID), busy and idle share of the analysis window,
its longest idle gaps with when they happened, and which jobs used it and how much.

``GpusNeed`` reads it through the read engine (two unions in one sweep)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tfprof.collector.analysis.units import pct, us
from tfprof.collector.read.gpu_sweeps import GpuBusy, JobGpuBusy
from tfprof.collector.read.needs import Got, Query, Sweep

NAME_FIELD = "uuid"
TIME_FIELD = "busy_us"
GAPS_SHOWN = 3


@dataclass(frozen=True)
class IdleGap:
    start_ns: int  # collector clock
    offset_s: float  # from the start of the analysis window
    duration_us: float

    def __str__(self) -> str:
        return f"{self.duration_us / 1000:,.3f} ms @ +{self.offset_s:.3f} s"


@dataclass(frozen=True)
class JobShare:
    job: str
    busy_us: float  # union of the job's records on this GPU
    share_pct: float  # of the GPU's busy time; shares add up past 100 when jobs overlap

    def __str__(self) -> str:
        return f"{self.job} {self.share_pct:.1f}%"


@dataclass(frozen=True)
class GpuRow:
    uuid: str
    name: str
    busy_us: float
    # Of the analysis window's captured time: all of it unless the processes on the GPU
    # were traced in windows (on-demand, periodic); gaps never span untraced time.
    busy_pct: float
    idle_pct: float
    longest_idle_us: float
    idle_gaps: list[IdleGap] = field(default_factory=list)  # longest first
    jobs: list[JobShare] = field(default_factory=list)  # largest share first


@dataclass(frozen=True)
class GpusNeed:
    gaps_shown: int = GAPS_SHOWN

    def queries(self) -> Sequence[Query]:
        return ()

    def sweeps(self) -> Sequence[Sweep[Any]]:
        return (GpuBusy(top_gaps=self.gaps_shown), JobGpuBusy())

    def build(self, got: Got) -> list[GpuRow]:
        read = got.read
        idle = got.swept(GpuBusy(top_gaps=self.gaps_shown))
        per_job = got.swept(JobGpuBusy())
        rows = []
        for g, ref in enumerate(read.gpus):
            mine = idle.gap_gpu == g
            shown = [
                IdleGap(
                    start_ns=int(s),
                    offset_s=round((int(s) - read.start_ns) / 1e9, 6),
                    duration_us=us(length),
                )
                for s, length in zip(
                    idle.gap_start[mine].tolist(), idle.gap_length[mine].tolist(), strict=True
                )
            ]
            busy = int(idle.busy[g])
            shares = [
                JobShare(read.jobs[j].label, us(per_job[g, j]), pct(per_job[g, j], busy))
                for j in np.flatnonzero(per_job[g]).tolist()
            ]
            shares.sort(key=lambda s: (-s.busy_us, s.job))
            captured = int(idle.captured_ns[g])  # busy and idle count only traced time
            rows.append(
                GpuRow(
                    uuid=ref.uuid,
                    name=ref.name,
                    busy_us=us(busy),
                    busy_pct=pct(busy, captured),
                    idle_pct=pct(captured - busy, captured),
                    longest_idle_us=shown[0].duration_us if shown else 0.0,
                    idle_gaps=shown,
                    jobs=shares,
                )
            )
        rows.sort(key=lambda r: (-r.busy_us, r.uuid))
        return rows
