"""host-stalls' evidence: the long gaps in each job's work on each GPU, and how much of
each gap the job's host spent in CUDA API calls, and in synchronising ones.

A whole host side gives it at once (``stall_cover_of``); a host side streamed past
``advice.host_rows`` keeps only each job's calls clipped to its gaps, a batch's union
at a time (``CallParts``), until the job's processes are all read (``covers_by_parts``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tfprof.collector.advice.host_calls import api_calls, calls_by_job
from tfprof.collector.analysis.intervals import Gaps, Merged, covered, gaps, merged_parts
from tfprof.collector.analysis.records import RecordSet
from tfprof.collector.read.captured_time import Captured

MIN_GAP_NS = 100_000  # gaps of 100 us or more: between steps, not between kernels
# Intervals a job's parts may hold before they are merged (64 MiB of them).
MERGE_ROWS = 1 << 22


def long_gaps(
    busy: Merged, lo: np.ndarray, hi: np.ndarray, captured: Sequence[Captured | None] = ()
) -> Gaps:
    """Gaps of MIN_GAP_NS or more in each job's work on each GPU: ``busy`` grouped by
    job * GPUs + GPU, ``lo`` and ``hi`` its first start and last end per group, cut at
    the edges of each job's ``captured`` windows (never spanning untraced time). The
    only time host-stalls asks the host about."""
    found = gaps(busy, lo.reshape(-1), hi.reshape(-1), MIN_GAP_NS)
    if not any(c is not None for c in captured):
        return found
    n_gpus = max(lo.shape[1], 1) if lo.ndim == 2 else 1
    job = found.group // n_gpus
    parts = [(found.group[job >= len(captured)], found.start[job >= len(captured)],
              found.end[job >= len(captured)])]  # fmt: skip
    for j, windows in enumerate(captured):
        mine = job == j
        if windows is None:
            parts.append((found.group[mine], found.start[mine], found.end[mine]))
        else:
            parts.append(windows.cut(found.group[mine], found.start[mine], found.end[mine]))
    g, s, e = (np.concatenate(p) for p in zip(*parts, strict=True))
    order = np.lexsort((s, g))
    keep = order[(e - s)[order] >= MIN_GAP_NS]
    return Gaps(g[keep], s[keep], e[keep])


class CallParts:
    """One job's calls in its gaps, a union per batch (``covers_by_parts``' parts).

    The processes of a job run at the same time, so their calls overlap (ranks
    synchronise together): once the parts hold MERGE_ROWS intervals and twice what the
    last merge left, they are merged into their union. What is held stays near the
    size of the job's union, not of every process's, and merges cost as much, in all,
    as one pass over the parts (each at twice the size of the one before)."""

    def __init__(self, merge_rows: int = MERGE_ROWS) -> None:
        self.parts: list[tuple[np.ndarray, np.ndarray]] = []
        self._merge_rows = merge_rows
        self._rows = 0
        self._after_merge = 0

    @property
    def rows(self) -> int:
        """Intervals held."""
        return self._rows

    def add(self, start: np.ndarray, end: np.ndarray) -> None:
        self.parts.append((start, end))
        self._rows += start.shape[0]
        if self._rows >= max(self._merge_rows, 2 * self._after_merge):
            self.parts = merged_parts(self.parts)
            self._rows = self._after_merge = sum(s.shape[0] for s, _ in self.parts)


@dataclass(frozen=True)
class StallCover:
    """Per long gap (a row of ``long_gaps``): ns of it the job's host spent in CUDA API
    calls (any thread, any process), and in synchronising ones; the jobs with calls."""

    api: np.ndarray
    sync: np.ndarray
    jobs: frozenset[int]


def stall_cover_of(rs: RecordSet, idle: Gaps) -> StallCover:
    """``StallCover`` of ``idle`` from every API call in ``rs.host``."""
    calls = api_calls(rs)
    syncs = api_calls(rs, sync_only=True)
    job_of = idle.group // max(len(rs.gpus), 1)
    return StallCover(
        covered(calls_by_job(rs, calls), job_of, idle.start, idle.end),
        covered(calls_by_job(rs, syncs), job_of, idle.start, idle.end),
        frozenset(rs.host.job[calls].tolist()),
    )
