"""Host<->device copies not overlapped with compute: copy time during which no kernel ran
on the same GPU, per job."""

from __future__ import annotations

import numpy as np

from tfprof.collector.advice.base import Context, Finding, share, us
from tfprof.collector.analysis.intervals import covered
from tfprof.core.records import RecordKind

NAME = "copy-overlap"
HOST_DEVICE = (1, 2)  # HtoD, DtoH
MAX_OVERLAP_SHARE = 0.5  # report when less than half of the copy time overlaps
MIN_SHARE_OF_SPAN = 0.05  # and exposed copies take at least 5% of the job's span


def check(ctx: Context) -> list[Finding]:
    rs = ctx.rs
    copies = np.flatnonzero(
        (rs.kind == RecordKind.MEMCPY) & np.isin(rs.copy_kind, np.array(HOST_DEVICE))
    )
    if copies.shape[0] == 0:
        return []
    overlap = covered(ctx.kernels_by_gpu, rs.gpu[copies], rs.start[copies], rs.end[copies])
    dur = rs.duration[copies]
    lo, hi = ctx.job_span
    findings = []
    for j in np.unique(rs.job[copies]).tolist():
        mine = rs.job[copies] == j
        total = int(dur[mine].sum())
        over = int(overlap[mine].sum())
        exposed = total - over
        span = int(hi[j] - lo[j])
        if total == 0 or over > MAX_OVERLAP_SHARE * total or exposed < MIN_SHARE_OF_SPAN * span:
            continue
        rows = copies[mine]
        by_dir = {
            name: us(dur[mine & (rs.copy_kind[copies] == k)].sum())
            for k, name in ((1, "HtoD_us"), (2, "DtoH_us"))
        }
        job = rs.jobs[j].label
        findings.append(
            Finding(
                rule=NAME,
                title=f"job {job}: {share(exposed, total)}% of host<->device copy time "
                "runs with no kernel on the GPU",
                impact_us=us(exposed),
                evidence={
                    "copies": int(mine.sum()),
                    "bytes": int(rs.bytes[rows].sum()),
                    "copy_us": us(total),
                    "overlapped_us": us(over),
                    "overlapped_pct": share(over, total),
                    "exposed_us": us(exposed),
                    "exposed_pct_of_span": share(exposed, span),
                    **by_dir,
                },
                suggestion=(
                    "Make copies asynchronous and overlap them with kernels: pinned host "
                    "buffers, cudaMemcpyAsync on a dedicated copy stream, and prefetching "
                    "the next batch while the current one computes (tf.data "
                    "prefetch_to_device, DataLoader pin_memory=True + non_blocking=True)."
                ),
                start_ns=int(rs.start[rows].min()),
                end_ns=int(rs.end[rows].max()),
                jobs=(job,),
                streams=ctx.tracks_of(rows),
            )
        )
    return findings
