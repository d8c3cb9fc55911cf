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


def _outermost(rs: RecordSet, ranges: np.ndarray) -> np.ndarray:
    """The ranges inside no other range of their process and thread."""
    h = rs.host
    key = h.process[ranges].astype(np.int64) << 32 | (h.thread[ranges] & 0xFFFFFFFF)
    top: np.ndarray = ranges[outermost(key, h.start[ranges], h.end[ranges])]
    return top


def is_step(names: Sequence[str]) -> np.ndarray:
    """Per names id: whether it names a step range."""
    return np.array([bool(STEP_NAME.search(n)) for n in names], dtype=bool)


def _steps(rs: RecordSet, job: int) -> tuple[np.ndarray, bool]:
    """The job's step ranges (rows of ``rs.host``) and whether they were named as steps."""
    h = rs.host
    ranges = host_ranges(rs)
    ranges = ranges[h.job[ranges] == job]
    # The pattern once per distinct name, not once per range.
    ids, inverse = np.unique(h.name[ranges], return_inverse=True)
    step = is_step([rs.names[int(n)] for n in ids.tolist()])
    named = step[inverse.reshape(-1)] if ids.shape[0] else np.zeros(0, dtype=bool)
    if named.any():
        return ranges[named], True
    return _outermost(rs, ranges), False


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


def _calls_in_steps(
    rs: RecordSet, steps: np.ndarray, calls: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per step, the calls of its process (any thread) that started inside it (both ends
    included); per call, whether it started inside any step."""
    h = rs.host
    per_step = np.zeros(steps.shape[0], dtype=np.int64)
    inside = np.zeros(calls.shape[0], dtype=bool)
    for process in np.unique(h.process[steps]).tolist():
        mine = np.flatnonzero(h.process[steps] == process)
        theirs = np.flatnonzero(h.process[calls] == process)
        per_step[mine], inside[theirs] = calls_in_steps(
            h.start[steps[mine]], h.end[steps[mine]], h.start[calls[theirs]]
        )
    return per_step, inside


def check(ctx: Context) -> list[Finding]:
    rs = ctx.rs
    h = rs.host
    syncs = api_calls(rs, sync_only=True)
    findings = []
    for j in np.unique(h.job[syncs]).tolist():
        mine = syncs[h.job[syncs] == j]
        steps, named = _steps(rs, j)
        if steps.shape[0] == 0:
            continue
        per_step, inside = _calls_in_steps(rs, steps, mine)
        used = per_step > 0 if not named else np.ones(steps.shape[0], dtype=bool)
        total = int(per_step.sum())
        mean = total / max(int(used.sum()), 1)
        if total < MIN_SYNCS or mean <= MAX_SYNCS_PER_STEP:
            continue
        calls = mine[inside]
        names, counts = np.unique(h.name[calls], return_counts=True)
        wait = int(h.duration[calls].sum())
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
                    "calls": {rs.names[int(n)]: int(c) for n, c in zip(names, counts, strict=True)},
                },
                suggestion=(
                    "Synchronise once per step at most: keep values on the GPU instead of "
                    "reading them back (.item(), .cpu(), .numpy(), printing), batch small "
                    "copies into one, use non-blocking copies from pinned memory, and order "
                    "work with events and stream waits rather than cudaStreamSynchronize."
                ),
                start_ns=int(h.start[calls].min()),
                end_ns=int(h.end[calls].max()),
                jobs=(label,),
            )
        )
    return findings
