"""Everything on one stream: a process whose kernels and copies on a GPU all go to one
CUDA stream, so no copy can ever overlap a kernel."""

from __future__ import annotations

import numpy as np

from tfprof.collector.advice.base import Context, Finding, us
from tfprof.collector.analysis.intervals import group_keys
from tfprof.core.records import RecordKind

NAME = "single-stream"
MIN_KERNELS = 10
MIN_COPIES = 1


def check(ctx: Context) -> list[Finding]:
    rs = ctx.rs
    rows = np.flatnonzero(ctx.on_gpu)
    if rows.shape[0] == 0:
        return []
    inverse, keys = group_keys(rs.process[rows], rs.device[rows])
    n = keys.shape[0]
    stream = rs.stream[rows]
    # One stream of each group (whichever row wrote last), and whether any row of the
    # group is on another: two passes, where a min and a max per group (ufunc.at) took
    # most of the rule's time.
    one = np.zeros(n, dtype=stream.dtype)
    one[inverse] = stream
    single = np.bincount(inverse, weights=stream != one[inverse], minlength=n) == 0
    kind = rs.kind[rows]
    kernels = np.bincount(inverse[kind == RecordKind.KERNEL], minlength=n)
    copies = np.bincount(inverse[kind == RecordKind.MEMCPY], minlength=n)
    copy_ns = np.bincount(
        inverse[kind == RecordKind.MEMCPY],
        weights=rs.duration[rows][kind == RecordKind.MEMCPY],
        minlength=n,
    )
    findings = []
    for i in np.flatnonzero(single & (kernels >= MIN_KERNELS) & (copies >= MIN_COPIES)):
        process, device = (int(v) for v in keys[i])
        mine = rows[inverse == i]
        ref = rs.processes[process]
        job = rs.jobs[ref.job].label
        track = ctx.track(process, device, int(one[i]))
        findings.append(
            Finding(
                rule=NAME,
                title=f"{track}: all {int(kernels[i]):,} kernels and {int(copies[i]):,} "
                "copies of the process on this GPU share one stream",
                impact_us=us(copy_ns[i]),
                evidence={
                    "stream": int(one[i]),
                    "kernels": int(kernels[i]),
                    "copies": int(copies[i]),
                    "copy_us": us(copy_ns[i]),
                    "pid": ref.pid,
                    "task": ref.task,
                },
                suggestion=(
                    "Issue copies on a separate stream (cudaMemcpyAsync on a copy stream "
                    "with events, torch.cuda.Stream, TF's multi-stream input prefetch) "
                    "so transfers overlap compute; on the legacy default stream every "
                    "operation serialises."
                ),
                start_ns=int(rs.start[mine].min()),
                end_ns=int(rs.end[mine].max()),
                jobs=(job,),
                streams=(track.format(),),
            )
        )
    return findings
