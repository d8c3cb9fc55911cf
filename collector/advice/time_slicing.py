"""Several jobs time-slicing one GPU: jobs whose work on the same physical GPU overlaps
in time, each job's share of the GPU's busy time, and how often the GPU switches from
one job's work to another's."""

from __future__ import annotations

import numpy as np

from tfprof.collector.advice.base import Context, Finding, share, us
from tfprof.collector.analysis.records import covered

NAME = "time-slicing"
MIN_SWITCHES = 2


def check(ctx: Context) -> list[Finding]:
    rs = ctx.rs
    lo, hi = ctx.job_gpu_span
    busy = ctx.job_gpu_busy
    findings = []
    for g in range(len(rs.gpus)):
        jobs = np.flatnonzero(hi[:, g] > lo[:, g])
        if jobs.shape[0] < 2:
            continue
        # the time when at least two of the jobs were running on this GPU
        first = np.sort(lo[jobs, g])
        last = np.sort(hi[jobs, g])[::-1]
        shared_lo, shared_hi = int(first[1]), int(last[1])
        if shared_hi <= shared_lo:
            continue  # one after the other, never together
        rows = np.flatnonzero(ctx.on_gpu & (rs.gpu == g))
        order = np.argsort(rs.start[rows], kind="stable")
        seq = rs.job[rows][order]
        switches = int(np.count_nonzero(seq[1:] != seq[:-1]))
        if switches < MIN_SWITCHES:
            continue
        gpu_busy = int(ctx.gpu_busy.busy[g])
        contended = int(
            covered(ctx.gpu_busy, np.array([g]), np.array([shared_lo]), np.array([shared_hi]))[0]
        )
        seconds = (shared_hi - shared_lo) / 1e9
        shares = [
            {
                "job": rs.jobs[int(j)].label,
                "busy_us": us(busy[j, g]),
                "share_pct": share(float(busy[j, g]), gpu_busy),
            }
            for j in jobs.tolist()
        ]
        shares.sort(key=lambda s: -float(s["busy_us"]))
        labels = tuple(str(s["job"]) for s in shares)
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
                    "shared_window_us": us(shared_hi - shared_lo),
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
