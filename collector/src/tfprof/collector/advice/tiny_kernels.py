"""Many tiny kernels: most kernels of a job run for a few microseconds, about what it
costs the CPU to launch one, so the job is launch-bound rather than compute-bound."""

from __future__ import annotations

import numpy as np

from tfprof.collector.advice.base import Context, Finding, share, us
from tfprof.core.records import RecordKind

NAME = "tiny-kernels"
TINY_NS = 10_000  # kernels shorter than 10 us
MIN_TINY = 1_000  # at least this many of them
MIN_TINY_SHARE = 0.5  # making up at least half of the job's kernels
LAUNCH_COST_NS = 5_000  # typical CPU cost of one launch: the impact estimate per kernel


def check(ctx: Context) -> list[Finding]:
    rs = ctx.rs
    kernels = np.flatnonzero(rs.kind == RecordKind.KERNEL)
    dur = rs.duration[kernels]
    jobs = rs.job[kernels]
    per_job = np.bincount(jobs, minlength=len(rs.jobs))
    tiny = dur < TINY_NS
    tiny_per_job = np.bincount(jobs[tiny], minlength=len(rs.jobs))
    findings = []
    for j in np.flatnonzero(
        (tiny_per_job >= MIN_TINY) & (tiny_per_job >= MIN_TINY_SHARE * np.maximum(per_job, 1))
    ).tolist():
        rows = kernels[tiny & (jobs == j)]
        names, counts = np.unique(rs.name[rows], return_counts=True)
        top = np.argsort(-counts, kind="stable")[:3]
        n = int(rows.shape[0])
        job = rs.jobs[j].label
        findings.append(
            Finding(
                rule=NAME,
                title=f"job {job}: {n:,} kernels ({share(n, int(per_job[j]))}% of its "
                f"kernels) run under {TINY_NS // 1000} us: launch-bound",
                impact_us=us(n * LAUNCH_COST_NS),
                evidence={
                    "tiny_kernels": n,
                    "kernels": int(per_job[j]),
                    "tiny_pct": share(n, int(per_job[j])),
                    "tiny_total_us": us(rs.duration[rows].sum()),
                    "tiny_avg_us": us(rs.duration[rows].mean()),
                    "most_frequent": [
                        {"name": rs.names[int(names[i])], "count": int(counts[i])}
                        for i in top.tolist()
                    ],
                },
                suggestion=(
                    "Fuse small kernels and amortise launches: compile with XLA "
                    "(jit_compile=True) or torch.compile, capture steady-state steps in "
                    "CUDA graphs, and raise the batch size so each kernel does more work."
                ),
                start_ns=int(rs.start[rows].min()),
                end_ns=int(rs.end[rows].max()),
                jobs=(job,),
                streams=ctx.tracks_of(rows),
            )
        )
    return findings
