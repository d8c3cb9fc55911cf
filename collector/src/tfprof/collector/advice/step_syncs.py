"""The evidence of sync-per-step: one process's synchronising calls counted in its
steps (``StepSyncs``), from a whole host side (``step_syncs_of``) or streamed past
``advice.host_rows`` (``step_syncs``, ``outermost``, ``is_step``).

Steps are the process's step ranges (``ProfilerStep#N`` from torch.profiler, or host
ranges with "step" in their name: ``train_step``, NVTX ``step 12``); without any, each
outermost host range (one inside no other range on its thread) holding a
synchronising call is taken for a step.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from tfprof.collector.advice.host_calls import api_calls
from tfprof.collector.analysis.ops import host_ranges
from tfprof.collector.analysis.records import RecordSet

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
