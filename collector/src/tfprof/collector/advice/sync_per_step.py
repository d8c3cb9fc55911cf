"""Excessive synchronisation per step: the host blocks on the GPU several times in every
step (CUDA API records of synchronising calls: ``host_calls.SYNC_CALL``).

Steps are the job's step ranges (``ProfilerStep#N`` from torch.profiler, or host ranges
with "step" in their name: ``train_step``, NVTX ``step 12``); without any, each
outermost host range (one inside no other range on its thread) holding a
synchronising call is taken for a step.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from tfprof.collector.advice.base import Context, Finding, us
from tfprof.collector.advice.host_calls import api_calls
from tfprof.collector.analysis.ops import host_ranges
from tfprof.collector.analysis.records import RecordSet

NAME = "sync-per-step"
MAX_SYNCS_PER_STEP = 4  # more than this many synchronising calls per step on average
MIN_SYNCS = 10  # in all the job's steps together
STEP_NAME = re.compile(r"^ProfilerStep#\d+$|(^|[^a-z])step([^a-z]|$)", re.IGNORECASE)


def outermost(key: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Which ranges lie inside no other range of the same ``key`` (process and thread)."""
    top = np.zeros(key.shape[0], dtype=bool)
    for k in np.unique(key).tolist():
        mine = np.flatnonzero(key == k)
        mine = mine[np.lexsort((-end[mine], start[mine]))]
        reach = np.maximum.accumulate(end[mine])
        first = np.ones(mine.shape[0], dtype=bool)
        first[1:] = end[mine][1:] > reach[:-1]
        top[mine[first]] = True
    return top


def is_step(names: Sequence[str]) -> np.ndarray:
    """Per names id: whether it names a step range."""
    return np.array([bool(STEP_NAME.search(n)) for n in names], dtype=bool)


_NONE = np.zeros(0, dtype=np.int64)


@dataclass(frozen=True)
class StepSyncs:
    """One process's synchronising calls counted in its steps: what the rule adds up
    over a job's processes (``step_syncs``), from the whole host side or streamed
    (``advice.host_rows``)."""

    job: int
    named: bool  # steps are step ranges; else the outermost ranges holding a call
    has_calls: bool  # the process made a synchronising call
    per_step: np.ndarray  # calls started inside each step
    names: np.ndarray = field(default_factory=lambda: _NONE)  # ids of the calls in a step
    counts: np.ndarray = field(default_factory=lambda: _NONE)  # and how many of each
    wait: int = 0  # their time (ns)
    start: int = np.iinfo(np.int64).max  # the first one's start, the last one's end
    end: int = np.iinfo(np.int64).min


def step_syncs(
    job: int,
    named: bool,
    step_start: np.ndarray,
    step_end: np.ndarray,
    call_start: np.ndarray,
    call_end: np.ndarray,
    call_name: np.ndarray,
) -> StepSyncs:
    """``StepSyncs`` of one process's steps and synchronising calls (any thread)."""
    per_step, inside = calls_in_steps(step_start, step_end, call_start)
    if not inside.any():
        return StepSyncs(job, named, call_start.shape[0] > 0, per_step)
    names, counts = np.unique(call_name[inside], return_counts=True)
    s, e = call_start[inside], call_end[inside]
    return StepSyncs(job, named, True, per_step, names, counts, int((e - s).sum()),
                     int(s.min()), int(e.max()))  # fmt: skip


def step_syncs_of(rs: RecordSet) -> list[StepSyncs]:
    """``StepSyncs`` of every process in ``rs.host`` (a process with step ranges counts
    in those, any other in its outermost ranges)."""
    h = rs.host
    syncs = api_calls(rs, sync_only=True)
    ranges = host_ranges(rs)
    ids, inverse = np.unique(h.name[ranges], return_inverse=True)
    # The pattern once per distinct name, not once per range.
    step = is_step([rs.names[int(n)] for n in ids.tolist()])
    named = step[inverse.reshape(-1)] if ids.shape[0] else np.zeros(0, dtype=bool)
    found = []
    for p in np.unique(np.concatenate((h.process[syncs], h.process[ranges]))).tolist():
        calls = syncs[h.process[syncs] == p]
        mine = h.process[ranges] == p
        steps = ranges[mine & named]
        if not steps.shape[0]:
            steps = ranges[mine]
            steps = steps[outermost(h.thread[steps] & 0xFFFFFFFF, h.start[steps], h.end[steps])]
        job = int(h.job[calls[0]] if calls.shape[0] else h.job[steps[0]])
        found.append(step_syncs(job, bool((mine & named).any()), h.start[steps], h.end[steps],
                                h.start[calls], h.end[calls], h.name[calls]))  # fmt: skip
    return found


def calls_in_steps(
    step_start: np.ndarray, step_end: np.ndarray, call_start: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """One process's steps and calls: per step, the calls that started inside it (both
    ends included); per call, whether it started inside any step. Sorted starts and
    ``searchsorted``, not a pass over every call per step."""
    order = np.argsort(call_start, kind="stable")
    starts = call_start[order]
    lo = np.searchsorted(starts, step_start, side="left")
    hi = np.searchsorted(starts, step_end, side="right")
    per_step = np.maximum(hi - lo, 0)
    # A call is inside a step when some step's [lo, hi) holds its sorted position.
    depth = np.zeros(starts.shape[0] + 1, dtype=np.int64)
    np.add.at(depth, lo, 1)
    np.add.at(depth, np.maximum(hi, lo), -1)
    inside = np.zeros(call_start.shape[0], dtype=bool)
    inside[order] = np.cumsum(depth)[:-1] > 0
    return per_step.astype(np.int64), inside


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
