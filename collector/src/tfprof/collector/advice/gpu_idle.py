"""GPU idle while the job runs: the share of each job's time on a GPU when nothing ran
there, and whether copies (kernels absent, copies present) or the host (nothing at all)
explain the time without kernels."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tfprof.collector.advice.base import Finding, share, us
from tfprof.collector.read.gpu_spans import GpuSpans
from tfprof.collector.read.needs import Got, Query, Sweep

NAME = "gpu-idle"
MIN_IDLE_SHARE = 0.20  # of the job's span on the GPU
MIN_SPAN_NS = 1_000_000  # shorter spans say nothing about steady state


@dataclass(frozen=True)
class GpuIdle:
    name: str = NAME

    def queries(self) -> Sequence[Query]:
        return ()

    def sweeps(self) -> Sequence[Sweep[Any]]:
        return (GpuSpans(),)

    def build(self, got: Got) -> list[Finding]:
        read = got.read
        found = got.swept(GpuSpans()).spans
        findings = []
        for j, g in sorted(found):
            s = found[(j, g)]
            a, b = s.lo, s.hi
            span = s.span  # only time the job was traced in counts
            if span < MIN_SPAN_NS:
                continue
            busy = s.busy
            idle = span - busy
            if idle < MIN_IDLE_SHARE * span:
                continue
            with_kernels = s.kernel_busy
            no_kernels = span - with_kernels
            copies_only = busy - with_kernels  # copies/memsets while no kernel ran
            gap_at, gap = s.gap_at, max(0, s.gap)
            copy_bound = copies_only >= idle
            job = read.jobs[j].label
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
                    title=f"GPU {read.gpus[g].uuid} idle {share(idle, span)}% of job {job}'s "
                    f"time on it; {why}",
                    impact_us=us(idle),
                    evidence={
                        "gpu": read.gpus[g].uuid,
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


RULE = GpuIdle()
