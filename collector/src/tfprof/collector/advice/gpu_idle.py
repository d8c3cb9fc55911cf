"""GPU idle while the job runs: the share of each job's time on a GPU when nothing ran
there, and whether copies (kernels absent, copies present) or the host (nothing at all)
explain the time without kernels."""

from __future__ import annotations

import numpy as np

from tfprof.collector.advice.base import Context, Finding, share, span_ns, us
from tfprof.collector.analysis.intervals import Merged, covered
from tfprof.collector.read.captured_time import Captured

NAME = "gpu-idle"
MIN_IDLE_SHARE = 0.20  # of the job's span on the GPU
MIN_SPAN_NS = 1_000_000  # shorter spans say nothing about steady state


def _in_span(merged: Merged, gpu: int, lo: int, hi: int) -> int:
    one = np.array([gpu], dtype=np.int64)
    return int(covered(merged, one, np.array([lo]), np.array([hi]))[0])


def _inside(merged: Merged, gpu: int, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    mine = merged.group == gpu
    s, e = merged.start[mine], merged.end[mine]
    inside = (e > lo) & (s < hi)
    return np.clip(s[inside], lo, hi), np.clip(e[inside], lo, hi)


def _longest_gap(
    merged: Merged, gpu: int, lo: int, hi: int, captured: Captured | None
) -> tuple[int, int]:
    """The longest idle gap of ``gpu`` in ``[lo, hi)``: (start, length); a gap never
    spans untraced time (outside the captured windows, when given)."""
    s, e = _inside(merged, gpu, lo, hi)
    starts = np.concatenate(([lo], e))
    ends = np.concatenate((s, [hi]))
    if captured is not None:
        _, starts, ends = captured.cut(np.zeros(starts.shape[0], np.int64), starts, ends)
        if not starts.shape[0]:
            return lo, 0
    length = ends - starts
    i = int(np.argmax(length))
    return int(starts[i]), max(0, int(length[i]))


def check(ctx: Context) -> list[Finding]:
    rs = ctx.rs
    lo, hi = ctx.job_gpu_span
    findings = []
    for j, g in zip(*np.nonzero(hi > lo), strict=True):
        a, b = int(lo[j, g]), int(hi[j, g])
        # Only time the job was traced in counts: idle time never spans untraced time.
        captured = rs.jobs[int(j)].captured
        span = span_ns(captured, a, b, ctx.gpu_busy, int(g))
        if span < MIN_SPAN_NS:
            continue
        busy = _in_span(ctx.gpu_busy, int(g), a, b)
        idle = span - busy
        if idle < MIN_IDLE_SHARE * span:
            continue
        with_kernels = _in_span(ctx.kernels_by_gpu, int(g), a, b)
        no_kernels = span - with_kernels
        copies_only = busy - with_kernels  # copies/memsets while no kernel ran
        gap_at, gap = _longest_gap(ctx.gpu_busy, int(g), a, b, captured)
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
