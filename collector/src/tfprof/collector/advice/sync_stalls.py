"""Synchronisation stalls: time the host spent waiting in CUDA synchronisation calls
(CUPTI SYNCHRONIZATION records), per job, and what the GPU was doing meanwhile."""

from __future__ import annotations

import numpy as np

from tfprof.collector.advice.base import Context, Finding, share, us
from tfprof.collector.analysis.intervals import covered
from tfprof.core.cupti_labels import SYNC_TYPES
from tfprof.core.records import RecordKind

NAME = "sync-stalls"
MIN_SHARE_OF_SPAN = 0.05  # host waits adding up to 5% of the job's span
MIN_WAIT_NS = 100_000


def check(ctx: Context) -> list[Finding]:
    rs = ctx.rs
    syncs = np.flatnonzero(rs.kind == RecordKind.SYNC)
    if syncs.shape[0] == 0:
        return []
    lo, hi = ctx.job_span
    gpu_during = covered(ctx.gpu_busy, rs.gpu[syncs], rs.start[syncs], rs.end[syncs])
    findings = []
    for j in np.unique(rs.job[syncs]).tolist():
        mine = rs.job[syncs] == j
        rows = syncs[mine]
        dur = rs.duration[rows]
        total = int(dur.sum())
        span = int(hi[j] - lo[j])
        if total < MIN_WAIT_NS or total < MIN_SHARE_OF_SPAN * span:
            continue
        longest = int(np.argmax(dur))
        by_type = {
            SYNC_TYPES.label(int(t)): us(dur[rs.sync_type[rows] == t].sum())
            for t in np.unique(rs.sync_type[rows]).tolist()
        }
        busy = int(gpu_during[mine].sum())
        job = rs.jobs[j].label
        findings.append(
            Finding(
                rule=NAME,
                title=f"job {job}: the host waited {us(total):,.0f} us in {rows.shape[0]:,} "
                f"synchronisations ({share(total, span)}% of its span)",
                impact_us=us(total),
                evidence={
                    "syncs": int(rows.shape[0]),
                    "wait_us": us(total),
                    "wait_pct_of_span": share(total, span),
                    "longest_us": us(dur[longest]),
                    "longest_at_ns": int(rs.start[rows[longest]]),
                    "by_type_us": by_type,
                    "gpu_busy_during_waits_pct": share(busy, total),
                },
                suggestion=(
                    "Remove synchronisations from the step: avoid reading GPU values on "
                    "the host each step (.item(), .numpy(), printing losses), blocking "
                    "copies and explicit cudaDeviceSynchronize/cudaStreamSynchronize; use "
                    "events and stream waits to order work instead."
                ),
                start_ns=int(rs.start[rows].min()),
                end_ns=int(rs.end[rows].max()),
                jobs=(job,),
                streams=ctx.tracks_of(rows),
            )
        )
    return findings
