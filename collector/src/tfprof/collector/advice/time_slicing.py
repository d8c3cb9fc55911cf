"""Several jobs time-slicing one GPU: jobs whose work on the same physical GPU overlaps
in time, each job's share of the GPU's busy time, and how often the GPU switches from
one job's work to another's."""

from __future__ import annotations

from typing import TypedDict

import numpy as np

from tfprof.collector.advice.base import Context, Finding, share, us
from tfprof.collector.analysis.intervals import covered

NAME = "time-slicing"
MIN_SWITCHES = 2


class JobShare(TypedDict):
    """One job's part of a shared GPU's busy time (evidence: plain JSON data)."""

    job: str
    busy_us: float
    share_pct: float


def _overlaps(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """[start, end) rows of the time when at least two of the spans run together."""
    times = np.concatenate([starts, ends])
    steps = np.concatenate([np.ones_like(starts), -np.ones_like(ends)])
    order = np.lexsort((steps, times))  # an end before a start at the same instant
    times, running = times[order], np.cumsum(steps[order])
    # Each step from time[i] to time[i + 1] has running[i] spans open.
    both = (running[:-1] >= 2) & (times[1:] > times[:-1])
    return np.stack([times[:-1][both], times[1:][both]], axis=1)


def check(ctx: Context) -> list[Finding]:
    rs = ctx.rs
    lo, hi = ctx.job_gpu_span
    busy = ctx.job_gpu_busy
    findings = []
    for g in range(len(rs.gpus)):
        jobs = np.flatnonzero(hi[:, g] > lo[:, g])
        if jobs.shape[0] < 2:
            continue
        shared = _overlaps(lo[jobs, g], hi[jobs, g])
        if shared.shape[0] == 0:
            continue  # one after the other, never together
        shared_lo, shared_hi = int(shared[0, 0]), int(shared[-1, 1])
        rows = np.flatnonzero(ctx.on_gpu & (rs.gpu == g))
        order = np.argsort(rs.start[rows], kind="stable")
        seq = rs.job[rows][order]
        switches = int(np.count_nonzero(seq[1:] != seq[:-1]))
        if switches < MIN_SWITCHES:
            continue
        gpu_busy = int(ctx.gpu_busy.busy[g])
        gpus = np.full(shared.shape[0], g)
        contended = int(covered(ctx.gpu_busy, gpus, shared[:, 0], shared[:, 1]).sum())
        shared_ns = int((shared[:, 1] - shared[:, 0]).sum())
        seconds = shared_ns / 1e9
        shares = [
            JobShare(
                job=rs.jobs[int(j)].label,
                busy_us=us(busy[j, g]),
                share_pct=share(float(busy[j, g]), gpu_busy),
            )
            for j in jobs.tolist()
        ]
        shares.sort(key=lambda s: -s["busy_us"])
        labels = tuple(s["job"] for s in shares)
        findings.append(
            Finding(
                rule=NAME,
                title=f"GPU {rs.gpus[g].uuid}: {len(labels)} jobs time-slice it ("
                + ", ".join(f"{s['job']} {s['share_pct']}%" for s in shares)
                + f"), {switches:,} switches between jobs",
                impact_us=us(contended),
                evidence={
                    "gpu": rs.gpus[g].uuid,
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
