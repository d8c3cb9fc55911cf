"""Excessive synchronisation per step: the host blocks on the GPU several times in every
step (CUDA API records of synchronising calls: ``host_calls.SYNC_CALL``).

Steps are the job's step ranges (``ProfilerStep#N`` from torch.profiler, or host ranges
with "step" in their name: ``train_step``, NVTX ``step 12``); without any, each
outermost host range (one inside no other range on its thread) holding a
synchronising call is taken for a step (``advice.step_syncs``).
"""

from __future__ import annotations

import numpy as np

from tfprof.collector.advice.base import Context, Finding, us
from tfprof.collector.advice.step_syncs import StepSyncs

NAME = "sync-per-step"
MAX_SYNCS_PER_STEP = 4  # more than this many synchronising calls per step on average
MIN_SYNCS = 10  # in all the job's steps together


def check(ctx: Context) -> list[Finding]:
    rs = ctx.rs
    by_job: dict[int, list[StepSyncs]] = {}
    for found in ctx.step_syncs:
        by_job.setdefault(found.job, []).append(found)
    findings = []
    for j in sorted(by_job):
        parts = by_job[j]
        if not any(p.has_calls for p in parts):
            continue
        # A job with step ranges counts in those only.
        named = any(p.named for p in parts)
        parts = [p for p in parts if p.named == named]
        per_step = np.concatenate([p.per_step for p in parts])
        if per_step.shape[0] == 0:
            continue
        used = per_step > 0 if not named else np.ones(per_step.shape[0], dtype=bool)
        total = int(per_step.sum())
        mean = total / max(int(used.sum()), 1)
        if total < MIN_SYNCS or mean <= MAX_SYNCS_PER_STEP:
            continue
        ids, inverse = np.unique(np.concatenate([p.names for p in parts]), return_inverse=True)
        counts = np.bincount(inverse.reshape(-1), np.concatenate([p.counts for p in parts]))
        wait = sum(p.wait for p in parts)
        label = rs.jobs[j].label
        kind = "steps" if named else "outermost host ranges (no step ranges found)"
        findings.append(
            Finding(
                rule=NAME,
                title=f"job {label}: {mean:,.1f} synchronising CUDA calls per step "
                f"({total:,} in {int(used.sum()):,} {kind})",
                impact_us=us(wait),
                evidence={
                    "sync_calls": total,
                    "steps": int(used.sum()),
                    "steps_from": "step ranges" if named else "outermost host ranges",
                    "per_step_mean": round(mean, 2),
                    "per_step_max": int(per_step.max()),
                    "wait_us": us(wait),
                    "calls": {rs.names[int(n)]: int(c) for n, c in zip(ids, counts, strict=True)},
                },
                suggestion=(
                    "Synchronise once per step at most: keep values on the GPU instead of "
                    "reading them back (.item(), .cpu(), .numpy(), printing), batch small "
                    "copies into one, use non-blocking copies from pinned memory, and order "
                    "work with events and stream waits rather than cudaStreamSynchronize."
                ),
                start_ns=min(p.start for p in parts),
                end_ns=max(p.end for p in parts),
                jobs=(label,),
            )
        )
    return findings
