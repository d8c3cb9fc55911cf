"""Excessive synchronisation per step: the host blocks on the GPU several times in every
step (CUDA API records of synchronising calls: ``read.stall_gaps.SYNC_CALL``).

Steps are the job's step ranges (``ProfilerStep#N`` from torch.profiler, or host ranges
with "step" in their name: ``train_step``, NVTX ``step 12``); without any, each
outermost host range (one inside no other range on its thread) holding a
synchronising call is taken for a step (``read.step_calls``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tfprof.collector.advice.base import Finding, us
from tfprof.collector.read.needs import Got, Query, Sweep
from tfprof.collector.read.step_calls import ProcessSteps, StepCalls

NAME = "sync-per-step"
MAX_SYNCS_PER_STEP = 4  # more than this many synchronising calls per step on average
MIN_SYNCS = 10  # in all the job's steps together


@dataclass(frozen=True)
class SyncPerStep:
    name: str = NAME

    def queries(self) -> Sequence[Query]:
        return ()

    def sweeps(self) -> Sequence[Sweep[Any]]:
        return (StepCalls(),)

    def build(self, got: Got) -> list[Finding]:
        read = got.read
        by_job: dict[int, list[ProcessSteps]] = {}
        for _, found in sorted(got.swept(StepCalls()).items()):
            by_job.setdefault(found.job, []).append(found)
        findings = []
        for j in sorted(by_job):
            parts = by_job[j]
            if not any(p.has_calls for p in parts):
                continue
            # A job with step ranges counts in those only.
            named = any(p.uses_named for p in parts)
            steps = [p.named if named else p.outermost for p in parts if p.uses_named == named]
            # Steps: every step range, or the outermost ranges holding a call.
            used = sum(s.steps if named else s.with_calls for s in steps)
            if not used:
                continue
            total = sum(s.calls for s in steps)
            mean = total / max(used, 1)
            if total < MIN_SYNCS or mean <= MAX_SYNCS_PER_STEP:
                continue
            calls: dict[int, int] = {}
            first: dict[int, int] = {}
            for s in steps:
                for k, n in s.names.items():
                    calls[k] = calls.get(k, 0) + n
                    first[k] = min(first.get(k, s.first_seen[k]), s.first_seen[k])
            names = read.names.names

            def order(k: int) -> tuple[int, str]:
                return first[k], names[k]  # noqa: B023 - used right here, in this loop

            wait = sum(s.wait for s in steps)
            label = read.jobs[j].label
            kind = "steps" if named else "outermost host ranges (no step ranges found)"
            findings.append(
                Finding(
                    rule=NAME,
                    title=f"job {label}: {mean:,.1f} synchronising CUDA calls per step "
                    f"({total:,} in {used:,} {kind})",
                    impact_us=us(wait),
                    evidence={
                        "sync_calls": total,
                        "steps": used,
                        "steps_from": "step ranges" if named else "outermost host ranges",
                        "per_step_mean": round(mean, 2),
                        "per_step_max": max(s.most for s in steps),
                        "wait_us": us(wait),
                        "calls": {
                            names[k]: calls[k]
                            for k in sorted(calls, key=lambda k: (first[k], names[k]))
                        },
                    },
                    suggestion=(
                        "Synchronise once per step at most: keep values on the GPU instead of "
                        "reading them back (.item(), .cpu(), .numpy(), printing), batch small "
                        "copies into one, use non-blocking copies from pinned memory, and order "
                        "work with events and stream waits rather than cudaStreamSynchronize."
                    ),
                    start_ns=min(s.start for s in steps),
                    end_ns=max(s.end for s in steps),
                    jobs=(label,),
                )
            )
        return findings


RULE = SyncPerStep()
