"""The host rules' evidence, gathered while ``prepare`` streams the host side past it
(``prepare(jobs, select=HostRows())``, ``analysis.host_pass``), so that no process's
host side is ever whole and little of it is kept:

- host-stalls: each job's API calls and synchronising calls, clipped to the job's long
  GPU gaps (the only time the rule asks about), as unions (``api_cover``,
  ``sync_cover``);
- sync-per-step: per process, its synchronising calls counted in its steps
  (``step_syncs``): step ranges, or in a process without any, the outermost ranges
  holding one of its synchronising calls (the outermost of those holding one);
- memory-capacity: every MEMORY record, kept in ``RecordSet.host``;
- launch-bound reads the calls the host pass links (``RecordSet.calls``).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

import numpy as np

from tfprof.collector.advice.base import Context
from tfprof.collector.advice.host_calls import ApiCover, is_sync_call
from tfprof.collector.advice.host_stalls import long_gaps
from tfprof.collector.advice.sync_per_step import StepSyncs, is_step, outermost, step_syncs
from tfprof.collector.analysis.intervals import Gaps, Merged, merge_intervals, union_of_unions
from tfprof.collector.analysis.records import ProcessHost, RecordSet
from tfprof.core.records import RecordKind

_EMPTY = np.zeros(0, dtype=np.int64)


class _Union:
    """Per job, the union of intervals clipped to that job's gaps."""

    def __init__(self, num_jobs: int) -> None:
        self.start: list[np.ndarray] = [_EMPTY] * num_jobs
        self.end: list[np.ndarray] = [_EMPTY] * num_jobs

    def add(self, job: int, start: list[np.ndarray], end: list[np.ndarray]) -> None:
        """Add a process's intervals (its lists are emptied): their own union first,
        then that merged into the job's without sorting the job's again."""
        s, e = np.concatenate([_EMPTY, *start]), np.concatenate([_EMPTY, *end])
        start.clear()
        end.clear()
        if not s.shape[0]:
            return
        mine = merge_intervals(np.zeros(s.shape[0], dtype=np.int64), s, e, 1)
        del s, e
        self.start[job], self.end[job] = union_of_unions(
            self.start[job], self.end[job], mine.start, mine.end
        )

    def merged(self) -> Merged:
        n = len(self.start)
        group = np.repeat(np.arange(n, dtype=np.int64), [s.shape[0] for s in self.start])
        start, end = np.concatenate(self.start), np.concatenate(self.end)
        busy = np.bincount(group, weights=end - start, minlength=n).astype(np.int64)
        return Merged(group, start, end, busy, n)


class _Process:
    """What is kept of the process being read until its last batch."""

    def __init__(self, job: int) -> None:
        self.job = job
        self.api: tuple[list[np.ndarray], list[np.ndarray]] = ([], [])  # clipped to gaps
        self.sync: tuple[list[np.ndarray], list[np.ndarray]] = ([], [])
        self.calls: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # sync: start, end, name
        self.steps: list[tuple[np.ndarray, np.ndarray]] = []  # step ranges: start, end
        # Ranges holding a sync call, outermost so far: thread, start, end.
        self.held = (_EMPTY, _EMPTY, _EMPTY)
        self.call_starts: np.ndarray | None = None  # sorted, once its calls are all seen

    def sync_calls(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Start, end and names id of every synchronising call of the process."""
        if not self.calls:
            return _EMPTY, _EMPTY, _EMPTY
        start, end, name = (np.concatenate(col) for col in zip(*self.calls, strict=True))
        self.calls = [(start, end, name)]
        return start, end, name


class HostRows:
    """A ``HostSelector`` gathering the host rules' evidence (a ``HostEvidence``)."""

    def __init__(self) -> None:
        self._sync = np.zeros(0, dtype=bool)  # per names id: a synchronising call
        self._step = np.zeros(0, dtype=bool)  # per names id: a step range
        self._gap_start: list[np.ndarray] = []  # per job: its long gaps (any GPU), merged
        self._gap_end: list[np.ndarray] = []
        self._api = _Union(0)
        self._in_sync = _Union(0)
        self._jobs: set[int] = set()
        self._steps: list[StepSyncs] = []
        self._process: _Process | None = None
        self._long_gaps = Gaps(_EMPTY, _EMPTY, _EMPTY)

    def start(self, rs: RecordSet) -> None:
        n = len(rs.jobs)
        gaps = self._long_gaps = long_gaps(Context(rs))
        n_gpus = max(len(rs.gpus), 1)
        merged = merge_intervals(gaps.group // n_gpus, gaps.start, gaps.end, n)
        bounds = np.searchsorted(merged.group, np.arange(n + 1)).tolist()
        self._gap_start = [merged.start[a:b] for a, b in itertools.pairwise(bounds)]
        self._gap_end = [merged.end[a:b] for a, b in itertools.pairwise(bounds)]
        self._api, self._in_sync = _Union(n), _Union(n)

    def _learn(self, names: Sequence[str]) -> None:
        known = self._sync.shape[0]
        if len(names) > known:
            new = names[known:]
            self._sync = np.concatenate([self._sync, is_sync_call(new)])
            self._step = np.concatenate([self._step, is_step(new)])

    def __call__(self, rows: ProcessHost) -> np.ndarray:
        self._learn(rows.names)
        c = rows.columns
        kind, name, start, end = c["kind"], c["name"], c["start"], c["end"]
        if not kind.shape[0]:
            return np.zeros(0, dtype=bool)
        job = int(c["job"][0])  # one process, one job
        p = self._process = self._process or _Process(job)
        calls = np.flatnonzero(kind == RecordKind.API)
        if calls.shape[0]:
            self._jobs.add(job)
            sync = calls[self._sync[name[calls]]]
            self._clip(job, start[calls], end[calls], p.api)
            self._clip(job, start[sync], end[sync], p.sync)
            p.calls.append((start[sync], end[sync], name[sync]))
        ranges = np.flatnonzero((kind == RecordKind.MARKER) & (c["thread"] != 0))
        if ranges.shape[0]:
            self._ranges(p, ranges, c)
        keep: np.ndarray = kind == RecordKind.MEMORY
        return keep

    def _clip(self, job: int, start: np.ndarray, end: np.ndarray,
              into: tuple[list[np.ndarray], list[np.ndarray]]) -> None:  # fmt: skip
        """The parts of ``[start, end)`` inside the job's gaps."""
        gs, ge = self._gap_start[job], self._gap_end[job]
        first = np.searchsorted(ge, start, side="right")  # the first gap ending after it
        count = np.maximum(np.searchsorted(gs, end, side="left") - first, 0)
        total = int(count.sum())
        if not total:
            return
        call = np.repeat(np.arange(start.shape[0]), count)
        gap = np.arange(total) - np.repeat(np.cumsum(count) - count, count) + first[call]
        into[0].append(np.maximum(start[call], gs[gap]))
        into[1].append(np.minimum(end[call], ge[gap]))

    def _ranges(self, p: _Process, ranges: np.ndarray, c: Mapping[str, np.ndarray]) -> None:
        if p.call_starts is None:  # API calls come before ranges
            p.call_starts = np.sort(p.sync_calls()[0])
        name, start, end = c["name"][ranges], c["start"][ranges], c["end"][ranges]
        steps = self._step[name]
        if steps.any():
            p.steps.append((start[steps], end[steps]))
        if p.steps:  # a process with step ranges counts in those only
            return
        # A range around one holding a call holds it too: the outermost ranges holding
        # a call are the outermost of those holding one, batch after batch.
        calls = p.call_starts
        held = np.searchsorted(calls, end, "right") > np.searchsorted(calls, start, "left")
        thread = np.concatenate((p.held[0], c["thread"][ranges][held] & 0xFFFFFFFF))
        s = np.concatenate((p.held[1], start[held]))
        e = np.concatenate((p.held[2], end[held]))
        top = outermost(thread, s, e)
        p.held = (thread[top], s[top], e[top])

    def end_process(self) -> None:
        p, self._process = self._process, None
        if p is None:
            return
        self._api.add(p.job, *p.api)
        self._in_sync.add(p.job, *p.sync)
        start, end, name = p.sync_calls()
        if p.steps:
            step_start = np.concatenate([s for s, _ in p.steps])
            step_end = np.concatenate([e for _, e in p.steps])
        else:
            step_start, step_end = p.held[1], p.held[2]
        if start.shape[0] or step_start.shape[0]:
            found = step_syncs(p.job, bool(p.steps), step_start, step_end, start, end, name)
            self._steps.append(found)

    # HostEvidence
    def api_cover(self, num_jobs: int) -> ApiCover:
        return ApiCover(self._api.merged(), frozenset(self._jobs))

    def sync_cover(self, num_jobs: int) -> Merged:
        return self._in_sync.merged()

    def step_syncs(self) -> list[StepSyncs]:
        return list(self._steps)

    def long_gaps(self) -> Gaps:
        return self._long_gaps
