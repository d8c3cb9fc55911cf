"""Host stalls with carried state: the long idle gaps (``MIN_GAP_NS`` or more) between a
job's work on each GPU, and how much of each gap the job's host spent in CUDA API calls
(any thread, any process of the job) and in synchronising ones (``StallGaps``).

Gaps lie between consecutive islands of the union of the job's kernels, copies and
memsets on the GPU (inside its span: never before its first or after its last); a gap
is known when the island after it opens. By then every call that started before the gap
ended has been fed: the job's calls are kept as the islands of their union, only those
that can still overlap a gap to come (ending after the earliest point a next gap can
start: the least reach of the job's open GPU islands). Of a job traced only in windows,
gaps are cut at the windows' edges (never spanning untraced time) before the long ones
are kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from tfprof.collector.read.engine import Read
from tfprof.collector.read.island_stream import IslandStream
from tfprof.collector.read.needs import Query
from tfprof.collector.read.time_chunks import NEVER, Chunk

MIN_GAP_NS = 100_000  # gaps of 100 us or more: between steps, not between kernels
API, SYNC = 5, 4
# Calls that block the host until the GPU has done something: explicit synchronisation
# (cudaDeviceSynchronize, cudaStreamSynchronize, cudaEventSynchronize, cuCtxSynchronize,
# ...) and synchronous copies (cudaMemcpy, cudaMemcpy2D, cuMemcpyDtoH_v2: no "Async").
SYNC_CALL = re.compile(r"Synchronize|^cu(da)?Memcpy(?!.*Async)")
# Jobs with an API call in the window: the others have no host side to measure with.
JOBS_WITH_CALLS = Query("SELECT DISTINCT job FROM {h} WHERE kind = 5")


@dataclass
class Stalls:
    """One job's long gaps on one GPU, added up: the rule's figures."""

    gaps: int = 0
    idle: int = 0  # ns in the gaps
    api: int = 0  # of it, ns the host was in a CUDA API call
    sync: int = 0  # in a synchronising call
    longest: int = 0  # the longest gap (the first of the longest): length, start
    longest_at: int = 0
    start: int = NEVER  # the first gap's start, the last one's end
    end: int = 0


@dataclass(frozen=True)
class StallFigures:
    """``stalls[(job, listed gpu)]``; ``jobs``: the jobs with API calls."""

    stalls: dict[tuple[int, int], Stalls]
    jobs: frozenset[int]


@dataclass(frozen=True)
class StallGaps:
    """Sweep: ``StallFigures``. A job's calls in every process cover its gaps on every
    GPU, so the read sweeps all processes in one time order (``whole_read``)."""

    whole_read = True
    tables: frozenset[str] = frozenset({"kernels", "copies", "memsets", "api_calls"})
    columns: frozenset[str] = frozenset({"device", "name"})
    queries: tuple[Query, ...] = (JOBS_WITH_CALLS,)

    def start(self, read: Read) -> _StallState:
        return _StallState(read)


@dataclass
class _Calls:
    """A job's calls kept: closed islands of their union (start, end), and the open one
    (``islands``)."""

    islands: IslandStream = field(default_factory=IslandStream)
    start: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    end: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def add(self, s: np.ndarray, e: np.ndarray) -> None:
        _, cs, ce = self.islands.feed(np.zeros(s.shape[0], dtype=np.int64), s, e)
        if cs.shape[0]:
            self.start = np.concatenate([self.start, cs])
            self.end = np.concatenate([self.end, ce])

    def cover(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Per gap [a, b): ns the calls cover."""
        s, e = self.start, self.end
        if self.islands.n and self.islands.open_start[0] != np.iinfo(np.int64).min:
            s = np.append(s, self.islands.open_start[0])
            e = np.append(e, self.islands.reach[0])
        out = np.zeros(a.shape[0], dtype=np.int64)
        for i, (lo, hi) in enumerate(zip(a.tolist(), b.tolist(), strict=True)):
            out[i] = int(np.maximum(np.minimum(e, hi) - np.maximum(s, lo), 0).sum())
        return out

    def forget(self, before: int) -> None:
        """Drop the islands ending at or before ``before``: no gap to come reaches them."""
        keep = self.end > before
        self.start, self.end = self.start[keep], self.end[keep]


class _StallState:
    def __init__(self, read: Read) -> None:
        self.read = read
        self.jobs = frozenset(int(r[0]) for r in read.rows(JOBS_WITH_CALLS))
        self.n_jobs = max(len(read.jobs), 1)
        self.job_of = np.array([p.job for p in read.processes], dtype=np.int64)
        self.work = IslandStream()  # per GPU key * jobs + job
        self.calls: dict[int, _Calls] = {}
        self.syncs: dict[int, _Calls] = {}
        self.stalls: dict[int, Stalls] = {}
        self._sync_names: dict[int, bool] = {}

    def _is_sync(self, name: np.ndarray) -> np.ndarray:
        ids, inverse = np.unique(name, return_inverse=True)
        new = [i for i in ids.tolist() if i not in self._sync_names]
        if new:
            names = self.read.names.names
            for i in new:
                self._sync_names[i] = bool(SYNC_CALL.search(names[i]))
        flags = np.array([self._sync_names[i] for i in ids.tolist()], dtype=bool)
        out: np.ndarray = flags[inverse.reshape(-1)]
        return out

    def feed(self, chunk: Chunk) -> None:
        if not self.jobs:
            return  # no host side: nothing to measure the gaps with
        kind, job = chunk["kind"], self.job_of[chunk["process"]]
        calls = np.flatnonzero((kind == API) & np.isin(job, list(self.jobs)))
        sync = calls[self._is_sync(chunk["name"][calls])] if calls.shape[0] else calls
        for j in np.unique(job[calls]).tolist():
            mine = calls[job[calls] == j]
            self.calls.setdefault(j, _Calls()).add(chunk["s"][mine], chunk["e"][mine])
            mine = sync[job[sync] == j]
            self.syncs.setdefault(j, _Calls()).add(chunk["s"][mine], chunk["e"][mine])
        work = np.flatnonzero((kind < SYNC) & np.isin(job, list(self.jobs)))
        gpu = self.read.gpu_keys(chunk["process"][work], chunk["device"][work])
        key = gpu * self.n_jobs + job[work]
        ik, ist, ien = self.work.feed(key, chunk["s"][work], chunk["e"][work])
        self._gaps(ik, ist, ien)
        self._forget(chunk.bound)

    def _gaps(self, ik: np.ndarray, ist: np.ndarray, ien: np.ndarray) -> None:
        """Closed islands: the gap after each one that the next island of its key (closed
        or open) begins."""
        if not ik.shape[0]:
            return
        nxt = np.append(ist[1:], 0)
        same = np.append(ik[1:] == ik[:-1], False)
        # A key's last closed island is followed by its open one.
        nxt[~same] = self.work.open_start[ik[~same]]
        long = np.flatnonzero(nxt - ien >= MIN_GAP_NS)
        for k in np.unique(ik[long]).tolist():
            mine = long[ik[long] == k]
            a, b = ien[mine], nxt[mine]
            j = k % self.n_jobs
            captured = self.read.jobs[j].captured
            if captured is not None:  # only traced time: gaps cut at the windows' edges
                _, a, b = captured.cut(np.zeros(a.shape[0], np.int64), a, b)
                keep = b - a >= MIN_GAP_NS
                a, b = a[keep], b[keep]
                if not a.shape[0]:
                    continue
            st = self.stalls.setdefault(k, Stalls())
            length = b - a
            st.gaps += int(a.shape[0])
            st.idle += int(length.sum())
            st.api += int(self.calls[j].cover(a, b).sum()) if j in self.calls else 0
            st.sync += int(self.syncs[j].cover(a, b).sum()) if j in self.syncs else 0
            i = int(np.argmax(length))
            if int(length[i]) > st.longest:
                st.longest, st.longest_at = int(length[i]), int(a[i])
            st.start, st.end = min(st.start, int(a.min())), max(st.end, int(b.max()))

    def _forget(self, bound: int) -> None:
        """A gap to come starts at an open island's reach or later, or (a GPU the job has
        no island on yet) after ``bound``: calls ending before that go."""
        w = self.work
        open_keys = np.flatnonzero(w.open_start[: w.n] != np.iinfo(np.int64).min)
        for j, calls in self.calls.items():
            mine = open_keys[open_keys % self.n_jobs == j]
            before = min(int(w.reach[mine].min()), bound) if mine.shape[0] else bound
            calls.forget(before)
            self.syncs[j].forget(before)

    def finish(self) -> StallFigures:
        listed = self.read.listed_gpu()
        out = {}
        for k, st in self.stalls.items():
            g, j = divmod(k, self.n_jobs)
            if listed[g] >= 0:
                out[(j, int(listed[g]))] = st
        return StallFigures(out, self.jobs)
