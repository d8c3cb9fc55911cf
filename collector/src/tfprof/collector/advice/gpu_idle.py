"""GPU idle while the job runs: the share of each job's time on a GPU when nothing ran
there, and whether copies (kernels absent, copies present) or the host (nothing at all)
explain the time without kernels."""

from __future__ import annotations

import numpy as np

from tfprof.collector.advice.base import Context, Finding, share, us
from tfprof.collector.analysis.intervals import Merged, covered

NAME = "gpu-idle"
MIN_IDLE_SHARE = 0.20  # of the job's span on the GPU
MIN_SPAN_NS = 1_000_000  # shorter spans say nothing about steady state


def _in_span(merged: Merged, gpu: int, lo: int, hi: int) -> int:
    one = np.array([gpu], dtype=np.int64)
    return int(covered(merged, one, np.array([lo]), np.array([hi]))[0])


def _longest_gap(merged: Merged, gpu: int, lo: int, hi: int) -> tuple[int, int]:
    mine = merged.group == gpu
    s, e = merged.start[mine], merged.end[mine]
    inside = (e > lo) & (s < hi)
    s, e = np.clip(s[inside], lo, hi), np.clip(e[inside], lo, hi)
    starts = np.concatenate(([lo], e))
    ends = np.concatenate((s, [hi]))
    length = ends - starts
    i = int(np.argmax(length))
    return int(starts[i]), max(0, int(length[i]))


def check(ctx: Context) -> list[Finding]:
    rs = ctx.rs
    lo, hi = ctx.job_gpu_span
    findings = []
    for j, g in zip(*np.nonzero(hi > lo), strict=True):
        a, b = int(lo[j, g]), int(hi[j, g])
        span = b - a
        if span < MIN_SPAN_NS:
            continue
        busy = _in_span(ctx.gpu_busy, int(g), a, b)
        idle = span - busy
        if idle < MIN_IDLE_SHARE * span:
            continue
        with_kernels = _in_span(ctx.kernels_by_gpu, int(g), a, b)
        no_kernels = span - with_kernels
        copies_only = busy - with_kernels  # copies/memsets while no kernel ran
        gap_at, gap = _longest_gap(ctx.gpu_busy, int(g), a, b)
        copy_bound = copies_only >= idle
        job = rs.jobs[int(j)].label
        if copy_bound:
            why = (
                f"copies explain {share(copies_only, no_kernels)}% of the time without kernels:"
                " the GPU mostly waits for data"
            )
            suggestion = (
                "Overlap transfers with compute: prefetch the next batch to the GPU "
                "(tf.data prefetch_to_device / DataLoader pin_memory=True with "
                "non_blocking=True) and issue copies on their own stream."
            )
        else:
            why = (
                f"host gaps explain {share(idle, no_kernels)}% of the time without kernels "
                "(no GPU work queued at all)"
            )
            suggestion = (
                "The GPU waits for the host: profile the input pipeline (tf.data "
                "prefetch / num_parallel_calls, more DataLoader workers), raise the batch "
                "size, and cut per-step Python and launch overhead (XLA, tf.function, "
                "CUDA graphs)."
            )
        findings.append(
            Finding(
                rule=NAME,
                title=f"GPU {rs.gpus[int(g)].uuid} idle {share(idle, span)}% of job {job}'s "
                f"time on it; {why}",
                impact_us=us(idle),
                evidence={
                    "gpu": rs.gpus[int(g)].uuid,
                    "span_us": us(span),
                    "idle_us": us(idle),
                    "idle_pct": share(idle, span),
                    "without_kernels_us": us(no_kernels),
                    "copies_only_us": us(copies_only),
                    "host_gap_us": us(idle),
                    "longest_idle_us": us(gap),
                    "longest_idle_at_ns": gap_at,
                    "explained_by": "copies" if copy_bound else "host",
                },
                suggestion=suggestion,
                start_ns=a,
                end_ns=b,
                jobs=(job,),
            )
        )
    return findings
