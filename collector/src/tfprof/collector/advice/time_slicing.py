"""Several jobs time-slicing one GPU: jobs whose work on the same physical GPU overlaps
in time, each job's share of the GPU's busy time, and how often the GPU switches from
one job's work to another's."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from tfprof.collector.advice.base import Finding, share, us
from tfprof.collector.read.gpu_spans import GpuSpans
from tfprof.collector.read.needs import Got, Query, Sweep

NAME = "time-slicing"
MIN_SWITCHES = 2


class JobShare(TypedDict):
    """One job's part of a shared GPU's busy time (evidence: plain JSON data)."""

    job: str
    busy_us: float
    share_pct: float


@dataclass(frozen=True)
class TimeSlicing:
    name: str = NAME

    def queries(self) -> Sequence[Query]:
        return ()

    def sweeps(self) -> Sequence[Sweep[Any]]:
        return (GpuSpans(),)

    def build(self, got: Got) -> list[Finding]:
        read = got.read
        found = got.swept(GpuSpans())
        findings = []
        for g in sorted(found.shared):
            gpu = found.shared[g]
            shared = gpu.windows
            shared_lo, shared_hi = int(shared[0, 0]), int(shared[-1, 1])
            switches = gpu.switches
            if switches < MIN_SWITCHES:
                continue
            contended = gpu.busy_in_windows
            shared_ns = int((shared[:, 1] - shared[:, 0]).sum())
            seconds = shared_ns / 1e9
            shares = [
                JobShare(
                    job=read.jobs[j].label,
                    busy_us=us(gpu.job_busy[j]),
                    share_pct=share(float(gpu.job_busy[j]), gpu.busy),
                )
                for j in gpu.jobs
            ]
            shares.sort(key=lambda s: -s["busy_us"])
            labels = tuple(s["job"] for s in shares)
            findings.append(
                Finding(
                    rule=NAME,
                    title=f"GPU {read.gpus[g].uuid}: {len(labels)} jobs time-slice it ("
                    + ", ".join(f"{s['job']} {s['share_pct']}%" for s in shares)
                    + f"), {switches:,} switches between jobs",
                    impact_us=us(contended),
                    evidence={
                        "gpu": read.gpus[g].uuid,
                        "jobs": shares,
                        "switches": switches,
                        "switches_per_s": round(switches / seconds, 1) if seconds else 0.0,
                        "shared_window_us": us(shared_ns),
                        "busy_in_shared_window_us": us(contended),
                    },
                    suggestion=(
                        "Jobs sharing a GPU slow each other down and context switches cost "
                        "time: give each job its own GPU (CUDA_VISIBLE_DEVICES, scheduler GPU "
                        "requests), or partition the GPU (MIG, MPS) when they must share."
                    ),
                    start_ns=shared_lo,
                    end_ns=shared_hi,
                    jobs=labels,
                )
            )
        return findings


RULE = TimeSlicing()
