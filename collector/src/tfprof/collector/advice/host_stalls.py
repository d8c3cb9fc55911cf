"""Host stalls between steps: a job's GPU sits idle in long gaps while its host is
waiting in a synchronising CUDA call, busy in other CUDA calls, or outside CUDA
altogether (Python, data loading, the framework between launches). Needs CUDA API
records to tell the three apart; ``gpu-idle`` covers jobs without them."""

from __future__ import annotations

import numpy as np

from tfprof.collector.advice.base import Context, Finding, share, span_ns, us

NAME = "host-stalls"
MIN_SHARE = 0.10  # adding up to 10% of the job's span on the GPU
MIN_TOTAL_NS = 1_000_000


def check(ctx: Context) -> list[Finding]:
    rs = ctx.rs
    cover = ctx.stall_cover
    if not cover.jobs:
        return []
    n_gpus = max(len(rs.gpus), 1)
    idle = ctx.long_gaps  # gaps of stall_cover.MIN_GAP_NS or more
    lo, hi = ctx.job_gpu_span
    g_key, g_start, g_end = idle.group, idle.start, idle.end
    findings = []
    for k in np.unique(g_key).tolist():
        j, g = divmod(int(k), n_gpus)
        if j not in cover.jobs:
            continue
        mine = g_key == k
        s, e = g_start[mine], g_end[mine]
        total = int((e - s).sum())
        span = span_ns(rs.jobs[j].captured, int(lo[j, g]), int(hi[j, g]), ctx.gpu_busy, g)
        if total < MIN_TOTAL_NS or total < MIN_SHARE * span:
            continue
        sync = int(cover.sync[mine].sum())
        api = int(cover.api[mine].sum())
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
