"""Host stalls between steps: a job's GPU sits idle in long gaps while its host is
waiting in a synchronising CUDA call, busy in other CUDA calls, or outside CUDA
altogether (Python, data loading, the framework between launches). Needs CUDA API
records to tell the three apart; ``gpu-idle`` covers jobs without them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tfprof.collector.advice.base import Finding, share, us
from tfprof.collector.read.gpu_spans import GpuSpans
from tfprof.collector.read.needs import Got, Query, Sweep
from tfprof.collector.read.stall_gaps import StallGaps

NAME = "host-stalls"
MIN_SHARE = 0.10  # adding up to 10% of the job's span on the GPU
MIN_TOTAL_NS = 1_000_000


@dataclass(frozen=True)
class HostStalls:
    name: str = NAME

    def queries(self) -> Sequence[Query]:
        return ()

    def sweeps(self) -> Sequence[Sweep[Any]]:
        return (StallGaps(), GpuSpans())

    def build(self, got: Got) -> list[Finding]:
        read = got.read
        found = got.swept(StallGaps())
        spans = got.swept(GpuSpans()).spans
        findings = []
        for j, g in sorted(found.stalls):
            st = found.stalls[(j, g)]
            total = st.idle
            span = spans[(j, g)].span  # only time the job was traced in counts
            if total < MIN_TOTAL_NS or total < MIN_SHARE * span:
                continue
            sync, api = st.sync, st.api
            label = read.jobs[j].label
            findings.append(
                Finding(
                    rule=NAME,
                    title=f"job {label}: GPU {read.gpus[g].uuid} idle {us(total):,.0f} us in "
                    f"{st.gaps:,} gaps between its work ({share(total, span)}% of its span); "
                    f"the host was in sync calls {share(sync, total)}%, other CUDA calls "
                    f"{share(api - sync, total)}%, outside CUDA {share(total - api, total)}%",
                    impact_us=us(total),
                    evidence={
                        "gaps": st.gaps,
                        "idle_us": us(total),
                        "idle_pct_of_span": share(total, span),
                        "in_sync_calls_us": us(sync),
                        "in_other_cuda_calls_us": us(api - sync),
                        "outside_cuda_us": us(total - api),
                        "longest_us": us(st.longest),
                        "longest_at_ns": st.longest_at,
                    },
                    suggestion=(
                        "Keep the GPU fed across steps: prefetch input (DataLoader workers and "
                        "pin_memory, tf.data prefetch), move host work off the critical path, "
                        "drop per-step synchronisations (.item(), printing losses) and let the "
                        "next step's launches overlap the GPU's work."
                    ),
                    start_ns=st.start,
                    end_ns=st.end,
                    jobs=(label,),
                )
            )
        return findings


RULE = HostStalls()
