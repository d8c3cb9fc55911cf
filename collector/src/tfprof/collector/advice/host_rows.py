"""The host rules' evidence, gathered while ``prepare`` streams the host side past it
(``prepare(jobs, select=HostRows())``, ``analysis.host_pass``), so that no process's
host side is ever whole and little of it is kept:

- host-stalls: each job's API calls and synchronising calls that overlap the job's long
  GPU gaps (the only time the rule asks about), one union per batch, until the job's
  processes are all read; then only how much of each gap they cover (``stall_cover``);
- sync-per-step: per process, its synchronising calls counted in its steps
  (``step_syncs``): step ranges, or in a process without any, the outermost ranges
  holding one of its synchronising calls (the outermost of those holding one);
- memory-capacity: every MEMORY record, kept in ``RecordSet.host``;
- launch-bound reads the calls the host pass links (``RecordSet.calls``).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from tfprof.collector.advice.base import Context
from tfprof.collector.advice.host_calls import is_sync_call
from tfprof.collector.advice.stall_cover import CallParts, StallCover
from tfprof.collector.advice.step_syncs import StepSyncs, is_step, outermost, step_syncs
from tfprof.collector.analysis.intervals import (
    Gaps,
    covers_by_parts,
    merge_intervals,
    search_sorted,
    union,
)
from tfprof.collector.analysis.records import ProcessHost, RecordSet
from tfprof.collector.timeline.prepare import rows_of
from tfprof.core.records import RecordKind

_EMPTY = np.zeros(0, dtype=np.int64)
# Call intervals a job's cover may be measured from alongside launch-bound (64 MiB).
CONCURRENT_COVER_ROWS = 1 << 22
_NEVER = np.iinfo(np.int64).max  # after every time


class _Process:
    """What is kept of the process being read until its last batch."""

    def __init__(self, job: int) -> None:
        self.job = job
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

    def __init__(self, gaps: Gaps | Future[Gaps] | None = None) -> None:
        """``gaps``: ``Context.long_gaps`` of the GPU table this pass reads, when the GPU
        rules' context had them (else ``start`` finds them again), or their future: the
        evidence thread waits for them, the host pass does not."""
        self._gaps: Gaps | None = None
        self._gaps_later = gaps
        self._split_lock = threading.Lock()
        self._n_jobs = 0
        self._sync = np.zeros(0, dtype=bool)  # per names id: a synchronising call
        self._step = np.zeros(0, dtype=bool)  # per names id: a step range
        self._gap_start: list[np.ndarray] = []  # per job: its long gaps (any GPU), merged
        self._gap_end: list[np.ndarray] = []
        self._n_gpus = 1
        # The job being read (processes come job by job) and its calls in its gaps.
        self._job = -1
        self._api = CallParts()
        self._in_sync = CallParts()
        self._cover_api = _EMPTY  # per long gap, once its job is done
        self._cover_sync = _EMPTY
        self._jobs: set[int] = set()
        self._steps: list[StepSyncs] = []
        self._process: _Process | None = None
        self._worker: ThreadPoolExecutor | None = None
        self._pending: Future[None] | None = None

    def start(self, rs: RecordSet) -> None:
        self._n_jobs = len(rs.jobs)
        self._n_gpus = max(len(rs.gpus), 1)
        if self._gaps_later is None:
            self._gaps_later = Context(rs).long_gaps
        if isinstance(self._gaps_later, Gaps):
            self._split()

    def _split(self) -> Gaps:
        """The long gaps (waited for), and each job's merged, once."""
        with self._split_lock:
            if self._gaps is not None:
                return self._gaps
            later = self._gaps_later
            gaps = later.result() if isinstance(later, Future) else later
            assert gaps is not None, "start() comes first"
            n = self._n_jobs
            merged = merge_intervals(gaps.group // self._n_gpus, gaps.start, gaps.end, n)
            bounds = np.searchsorted(merged.group, np.arange(n + 1)).tolist()
            self._gap_start = [merged.start[a:b] for a, b in itertools.pairwise(bounds)]
            self._gap_end = [merged.end[a:b] for a, b in itertools.pairwise(bounds)]
            self._cover_api = np.zeros(gaps.start.shape[0], dtype=np.int64)
            self._cover_sync = np.zeros(gaps.start.shape[0], dtype=np.int64)
            self._gaps = gaps
            return gaps

    def _learn(self, names: Sequence[str]) -> None:
        known = self._sync.shape[0]
        if len(names) > known:
            new = names[known:]
            self._sync = np.concatenate([self._sync, is_sync_call(new)])
            self._step = np.concatenate([self._step, is_step(new)])

    def __call__(self, rows: ProcessHost) -> np.ndarray:
        self._learn(rows.names)
        c = rows.columns
        kind = c["kind"]
        if kind.shape[0]:
            self._later(self._digest, c)
        keep: np.ndarray = kind == RecordKind.MEMORY
        return keep

    def _later(self, work: Callable[..., None], *args: object) -> None:
        """Run ``work`` on the evidence thread, after what was handed to it before. The
        host pass links and reads the next batch meanwhile (numpy and Parquet release
        the GIL: two cores work); at most one batch waits, and its error surfaces at the
        next hand-over."""
        if self._pending is not None:
            self._pending.result()
        if self._worker is None:
            self._worker = ThreadPoolExecutor(1, thread_name_prefix="tfprof-host-rows")
        self._pending = self._worker.submit(work, *args)

    def _done(self) -> None:
        """Wait for the evidence thread's work (raising its error) and end the thread."""
        pending, worker = self._pending, self._worker
        self._pending = self._worker = None
        if worker is not None:
            worker.shutdown(wait=True)
        if pending is not None:
            pending.result()

    def _digest(self, c: Mapping[str, np.ndarray]) -> None:
        """One batch's evidence (on the evidence thread: the only one that touches it)."""
        kind, name, start, end = c["kind"], c["name"], c["start"], c["end"]
        job = int(c["job"][0])  # one process, one job
        if job != self._job:
            self._finish_job()
            self._job = job
        p = self._process = self._process or _Process(job)
        calls = np.flatnonzero(kind == RecordKind.API)
        if calls.shape[0]:
            self._jobs.add(job)
            sync = calls[self._sync[name[calls]]]
            self._api.add(*self._in_gaps(job, start[calls], end[calls]))
            self._in_sync.add(*self._in_gaps(job, start[sync], end[sync]))
            p.calls.append((start[sync], end[sync], name[sync]))
        ranges = np.flatnonzero((kind == RecordKind.MARKER) & (c["thread"] != 0))
        if ranges.shape[0]:
            self._ranges(p, ranges, c)

    def _in_gaps(
        self, job: int, start: np.ndarray, end: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The union of the calls ``[start, end)``, those of its intervals that overlap
        none of the job's gaps left out: only how much of each gap they cover is asked
        for, and what lies outside the gaps of those kept costs nothing."""
        self._split()
        gs, ge = self._gap_start[job], self._gap_end[job]
        s, e = union(start, end)  # fewer rows to search for, in order
        # The first gap ending after an interval starts overlaps it when it starts
        # before the interval ends (the gaps are disjoint, in order).
        after = search_sorted(ge, s, side="right")
        hit = np.take(np.append(gs, _NEVER), after) < e
        return s[hit], e[hit]

    def _finish_job(self) -> None:
        """How much of each of the job's long gaps its calls cover; the calls go."""
        job, api, in_sync = self._job, self._api.parts, self._in_sync.parts
        self._api, self._in_sync = CallParts(), CallParts()
        if job < 0 or not api:
            return
        gaps = self.long_gaps()
        mine = np.flatnonzero(gaps.group // self._n_gpus == job)
        by_gpu = []
        for k in np.unique(gaps.group[mine]).tolist():  # a GPU's gaps: disjoint, in order
            rows = mine[gaps.group[mine] == k]
            by_gpu.append(rows[np.argsort(gaps.start[rows], kind="stable")])
        groups = [(gaps.start[rows], gaps.end[rows]) for rows in by_gpu]
        for cover, parts in ((self._cover_api, api), (self._cover_sync, in_sync)):
            for rows, got in zip(by_gpu, covers_by_parts(parts, groups), strict=True):
                cover[rows] = got

    def _ranges(self, p: _Process, ranges: np.ndarray, c: Mapping[str, np.ndarray]) -> None:
        if p.call_starts is None:  # API calls come before ranges
            p.call_starts = np.sort(p.sync_calls()[0])
        rows = rows_of(ranges, c["kind"].shape[0])
        name, start, end = c["name"][rows], c["start"][rows], c["end"][rows]
        steps = self._step[name]
        if steps.any():
            p.steps.append((start[steps], end[steps]))
        if p.steps:  # a process with step ranges counts in those only
            return
        # A range around one holding a call holds it too: the outermost ranges holding
        # a call are the outermost of those holding one, batch after batch.
        # A range holds a call when the first call at or after its start is not after
        # its end.
        # Ranges come in start order from a trace's tracer; checked, not assumed.
        in_order = bool(np.all(start[1:] >= start[:-1]))
        after = (search_sorted if in_order else np.searchsorted)(p.call_starts, start, "left")
        held = np.take(np.append(p.call_starts, _NEVER), after) <= end
        thread = np.concatenate((p.held[0], c["thread"][rows][held] & 0xFFFFFFFF))
        s = np.concatenate((p.held[1], start[held]))
        e = np.concatenate((p.held[2], end[held]))
        top = outermost(thread, s, e)
        p.held = (thread[top], s[top], e[top])

    def end_process(self) -> None:
        self._later(self._end_process)

    def end(self) -> None:
        """The last job's calls are measured against its gaps: on the evidence thread,
        while the host rules that do not ask for them run (launch-bound), when they are
        few; else first (at 100M records, both at once peaked 260 MiB higher)."""
        self._done()
        if self._api.rows + self._in_sync.rows < CONCURRENT_COVER_ROWS:
            self._later(self._end_job)
        else:
            self._end_job()

    def _end_job(self) -> None:
        self._finish_job()
        self._job = -1

    def _end_process(self) -> None:
        p, self._process = self._process, None
        if p is None:
            return
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
    def stall_cover(self) -> StallCover:
        self._done()
        self._end_job()  # nothing left when ``end`` was called (as the host pass does)
        self.long_gaps()  # a cover of zeros per gap, when no call was in one
        return StallCover(self._cover_api, self._cover_sync, frozenset(self._jobs))

    def step_syncs(self) -> list[StepSyncs]:
        self._done()
        return list(self._steps)

    def long_gaps(self) -> Gaps:
        if self._gaps_later is None:  # never started
            return Gaps(_EMPTY, _EMPTY, _EMPTY)
        return self._split()
