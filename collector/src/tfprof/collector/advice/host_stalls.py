"""Host stalls between steps: a job's GPU sits idle in long gaps while its host is
waiting in a synchronising CUDA call, busy in other CUDA calls, or outside CUDA
altogether (Python, data loading, the framework between launches). Needs CUDA API
records to tell the three apart; ``gpu-idle`` covers jobs without them."""

from __future__ import annotations

import numpy as np

from tfprof.collector.advice.base import Context, Finding, share, us
from tfprof.collector.analysis.intervals import Gaps, covered, gaps

NAME = "host-stalls"
MIN_GAP_NS = 100_000  # gaps of 100 us or more: between steps, not between kernels
MIN_SHARE = 0.10  # adding up to 10% of the job's span on the GPU
MIN_TOTAL_NS = 1_000_000


def long_gaps(ctx: Context) -> Gaps:
    """Gaps of MIN_GAP_NS or more in each job's work on each GPU (group: job * GPUs +
    GPU): the only time this rule asks the host about."""
    busy = ctx.job_gpu_merged()
    lo, hi = ctx.job_gpu_span
    idle = gaps(busy, lo.reshape(-1), hi.reshape(-1))
    long = idle.length >= MIN_GAP_NS
    return Gaps(idle.group[long], idle.start[long], idle.end[long])


def check(ctx: Context) -> list[Finding]:
    rs = ctx.rs
    cover = ctx.api_cover
    if not cover.jobs:
        return []
    in_api = cover.merged
    in_sync = ctx.sync_cover
    n_gpus = max(len(rs.gpus), 1)
    idle = ctx.long_gaps
    lo, hi = ctx.job_gpu_span
    g_key, g_start, g_end = idle.group, idle.start, idle.end
    jobs_with_calls = cover.jobs
    findings = []
    for k in np.unique(g_key).tolist():
        j, g = divmod(int(k), n_gpus)
        if j not in jobs_with_calls:
            continue
        mine = g_key == k
        s, e = g_start[mine], g_end[mine]
        total = int((e - s).sum())
        span = int(hi[j, g] - lo[j, g])
        if total < MIN_TOTAL_NS or total < MIN_SHARE * span:
            continue
        job_of = np.full(s.shape[0], j, dtype=np.int64)
        sync = int(covered(in_sync, job_of, s, e).sum())
        api = int(covered(in_api, job_of, s, e).sum())
        longest = int(np.argmax(e - s))
        label = rs.jobs[j].label
        findings.append(
            Finding(
                rule=NAME,
                title=f"job {label}: GPU {rs.gpus[g].uuid} idle {us(total):,.0f} us in "
                f"{s.shape[0]:,} gaps between its work ({share(total, span)}% of its span); "
                f"the host was in sync calls {share(sync, total)}%, other CUDA calls "
                f"{share(api - sync, total)}%, outside CUDA {share(total - api, total)}%",
                impact_us=us(total),
                evidence={
                    "gaps": int(s.shape[0]),
                    "idle_us": us(total),
                    "idle_pct_of_span": share(total, span),
                    "in_sync_calls_us": us(sync),
                    "in_other_cuda_calls_us": us(api - sync),
                    "outside_cuda_us": us(total - api),
                    "longest_us": us(e[longest] - s[longest]),
                    "longest_at_ns": int(s[longest]),
                },
                suggestion=(
                    "Keep the GPU fed across steps: prefetch input (DataLoader workers and "
                    "pin_memory, tf.data prefetch), move host work off the critical path, "
                    "drop per-step synchronisations (.item(), printing losses) and let the "
                    "next step's launches overlap the GPU's work."
                ),
                start_ns=int(s.min()),
                end_ns=int(e.max()),
                jobs=(label,),
            )
        )
    return findings
