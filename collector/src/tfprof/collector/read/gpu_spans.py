"""Each job's span on each GPU measured against the GPU's busy time, as gpu-idle and
time-slicing ask it, in one sweep (``GpuSpans``).

A job's span on a GPU is its first start to its last end of kernels, copies and memsets
there (``engine.SPANS``, SQL, known before the sweep). Per span: how much of it the GPU
was busy (the union of every job's work on the GPU), busy with kernels, and its longest
idle gap (``advice.gpu_idle``'s definition: islands clipped to the span, the first
longest). Of a job traced only in windows, only captured time counts: its span's length
is the captured part plus what its GPU's work ran past the windows' edges (a record
captured in a window counts whole), and a gap never spans untraced time (gaps are cut at
the windows' edges). Per GPU that jobs share at the same time (their spans overlap): the
GPU's busy time in the shared windows, each job's busy time there (the union of its own
work), the GPU's, and how often the work switches from one job's to another's in start
order (ties in process order, as the timeline lists them).

Carried: each union's open island (``island_stream``), per span its last island end and
best gap, per shared GPU the job its last record was of.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tfprof.collector.read.engine import SPANS, Read
from tfprof.collector.read.island_stream import Islands, IslandStream
from tfprof.collector.read.needs import Query
from tfprof.collector.read.settled_chunks import Settled
from tfprof.collector.read.time_chunks import Chunk
from tfprof.collector.timeline.captured_time import Captured

GPU_TABLES = frozenset({"kernels", "copies", "memsets", "syncs"})
KERNEL, WORK = 1, (1, 2, 3)


def overlapping_time(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """[start, end) rows of the time when at least two of the spans run together."""
    times = np.concatenate([starts, ends])
    steps = np.concatenate([np.ones_like(starts), -np.ones_like(ends)])
    order = np.lexsort((steps, times))  # an end before a start at the same instant
    times, running = times[order], np.cumsum(steps[order])
    # Each step from time[i] to time[i + 1] has running[i] spans open.
    both = (running[:-1] >= 2) & (times[1:] > times[:-1])
    return np.stack([times[:-1][both], times[1:][both]], axis=1)


@dataclass
class SpanBusy:
    """One job's span ``[lo, hi)`` on one GPU, and what the GPU did in it."""

    lo: int
    hi: int
    busy: int = 0  # ns the GPU was busy (any job's work)
    kernel_busy: int = 0  # ns a kernel ran on it
    gap_at: int = 0  # the longest idle gap (the first of the longest): start, length
    gap: int = -1
    last_end: int = 0  # carried: the end of the last island met, clipped to the span
    captured: Captured | None = None  # the job's windows (None: traced throughout)
    ran_past: int = 0  # ns the GPU's work in the span ran outside the windows

    @property
    def span(self) -> int:
        """The span's traced length: all of it, or its captured part plus what the
        GPU's work ran past the windows' edges."""
        if self.captured is None:
            return self.hi - self.lo
        return self.captured.total(self.lo, self.hi) + self.ran_past


@dataclass
class SharedGpu:
    """A GPU that several jobs used at the same time."""

    jobs: list[int]
    windows: np.ndarray  # [start, end) rows when at least two of their spans overlap
    busy_in_windows: int = 0
    busy: int = 0  # the GPU's busy time (every job's work)
    job_busy: dict[int, int] = field(default_factory=dict)  # the union of each job's work
    switches: int = 0
    last_job: int = -1


@dataclass(frozen=True)
class SpanFigures:
    """Keyed by listed GPU (``Read.gpus``): ``spans[(job, gpu)]``, ``shared[gpu]``."""

    spans: dict[tuple[int, int], SpanBusy]
    shared: dict[int, SharedGpu]


@dataclass(frozen=True)
class GpuSpans:
    tables: frozenset[str] = GPU_TABLES
    columns: frozenset[str] = frozenset({"device"})
    queries: tuple[Query, ...] = (SPANS,)

    def start(self, read: Read) -> _GpuSpansState:
        return _GpuSpansState(read)


class _GpuSpansState:
    def __init__(self, read: Read) -> None:
        self.read = read
        found: dict[tuple[int, int], list[int]] = {}
        for job, process, device, kind, _, _, _, first, last in read.rows(SPANS):
            if kind in WORK:
                key = (int(job), read.gpu_keys.key(int(process), int(device)))
                lo_hi = found.setdefault(key, [int(first), int(last)])
                lo_hi[0], lo_hi[1] = min(lo_hi[0], int(first)), max(lo_hi[1], int(last))
        self.spans = {
            k: SpanBusy(lo, hi, last_end=lo, captured=read.jobs[k[0]].captured)
            for k, (lo, hi) in found.items()
            if hi > lo
        }
        self.by_gpu: dict[int, list[SpanBusy]] = {}
        for (_, g), span in self.spans.items():
            self.by_gpu.setdefault(g, []).append(span)
        self.shared: dict[int, SharedGpu] = {}
        for g in sorted({g for _, g in self.spans}):
            jobs = sorted(j for j, k in self.spans if k == g)
            if len(jobs) < 2:
                continue
            lo = np.array([self.spans[(j, g)].lo for j in jobs], dtype=np.int64)
            hi = np.array([self.spans[(j, g)].hi for j in jobs], dtype=np.int64)
            windows = overlapping_time(lo, hi)
            if windows.shape[0]:
                self.shared[g] = SharedGpu(jobs, windows, job_busy=dict.fromkeys(jobs, 0))
        self.busy, self.kernels, self.per_job = IslandStream(), IslandStream(), IslandStream()
        self.n_jobs = max(len(read.jobs), 1)
        self.job_of = np.array([p.job for p in read.processes], dtype=np.int64)
        rank = np.zeros(len(read.processes), dtype=np.int64)
        rank[list(read.cat.load_order)] = np.arange(len(read.processes))
        self.rank = rank
        self.settled = Settled()

    def feed(self, chunk: Chunk) -> None:
        work = np.flatnonzero(chunk["kind"] <= WORK[-1])
        gpu = self.read.gpu_keys(chunk["process"][work], chunk["device"][work])
        s, e = chunk["s"][work], chunk["e"][work]
        self._busy(self.busy.feed(gpu, s, e))
        k = chunk["kind"][work] == KERNEL
        self._kernels(self.kernels.feed(gpu[k], s[k], e[k]))
        if self.shared:
            self._shared(chunk, work, gpu)

    def _busy(self, found: Islands) -> None:
        ik, ist, ien = found
        for g in np.unique(ik).tolist():
            mine = ik == g
            s, e = ist[mine], ien[mine]
            for span in self.by_gpu.get(g, ()):
                span.busy += _overlap(s, e, span.lo, span.hi)
                if span.captured is not None:
                    span.ran_past += _outside(span, s, e)
                _gaps(span, s, e)
            shared = self.shared.get(g)
            if shared is not None:
                shared.busy += int((e - s).sum())
                for a, b in shared.windows.tolist():
                    shared.busy_in_windows += _overlap(s, e, a, b)

    def _kernels(self, found: Islands) -> None:
        ik, ist, ien = found
        for g in np.unique(ik).tolist():
            mine = ik == g
            for span in self.by_gpu.get(g, ()):
                span.kernel_busy += _overlap(ist[mine], ien[mine], span.lo, span.hi)

    def _shared(self, chunk: Chunk, work: np.ndarray, gpu: np.ndarray) -> None:
        on = np.isin(gpu, np.array(list(self.shared), dtype=np.int64))
        rows = work[on]
        job = self.job_of[chunk["process"][rows]]
        key = gpu[on] * self.n_jobs + job
        ik, ist, ien = self.per_job.feed(key, chunk["s"][rows], chunk["e"][rows])
        self._job_busy(ik, ien - ist)
        part = Chunk({"s": chunk["s"][rows], "gpu": gpu[on], "job": job,
                      "rank": self.rank[chunk["process"][rows]]}, chunk.bound)  # fmt: skip
        settled = self.settled.feed(part)
        if settled is not None:
            self._switches(settled)

    def _job_busy(self, key: np.ndarray, length: np.ndarray) -> None:
        for k, n in zip(key.tolist(), length.tolist(), strict=True):
            g, j = divmod(k, self.n_jobs)
            self.shared[g].job_busy[j] += n

    def _switches(self, part: Chunk) -> None:
        order = np.lexsort((part["rank"], part["s"]))  # ties in process order
        gpu, job = part["gpu"][order], part["job"][order]
        for g in np.unique(gpu).tolist():
            seq = job[gpu == g]
            shared = self.shared[g]
            shared.switches += int(np.count_nonzero(seq[1:] != seq[:-1]))
            if shared.last_job >= 0 and int(seq[0]) != shared.last_job:
                shared.switches += 1
            shared.last_job = int(seq[-1])

    def finish(self) -> SpanFigures:
        self._busy(self.busy.finish())
        self._kernels(self.kernels.finish())
        ik, ist, ien = self.per_job.finish()
        self._job_busy(ik, ien - ist)
        for span in self.spans.values():  # the gap after the last island
            _longest(span, np.array([span.last_end]), np.array([span.hi]))
            if span.gap < 0:  # no traced idle time at all
                span.gap_at, span.gap = span.lo, 0
        listed = self.read.listed_gpu()
        return SpanFigures(
            {(j, int(listed[g])): v for (j, g), v in self.spans.items() if listed[g] >= 0},
            {int(listed[g]): v for g, v in self.shared.items() if listed[g] >= 0},
        )


def _overlap(s: np.ndarray, e: np.ndarray, lo: int, hi: int) -> int:
    """How much of ``[lo, hi)`` the disjoint intervals ``[s, e)`` cover."""
    return int(np.maximum(np.minimum(e, hi) - np.maximum(s, lo), 0).sum())


def _outside(span: SpanBusy, s: np.ndarray, e: np.ndarray) -> int:
    """Of the islands ``[s, e)`` clipped to the span, ns outside its captured windows."""
    assert span.captured is not None
    s, e = np.clip(s, span.lo, span.hi), np.clip(e, span.lo, span.hi)
    return int((e - s).sum() - span.captured.measure(s, e).sum())


def _gaps(span: SpanBusy, s: np.ndarray, e: np.ndarray) -> None:
    """Islands (in order) met: the gaps between them inside the span, the first longest."""
    inside = (e > span.lo) & (s < span.hi)
    if not inside.any():
        return
    s, e = np.clip(s[inside], span.lo, span.hi), np.clip(e[inside], span.lo, span.hi)
    _longest(span, np.concatenate(([span.last_end], e[:-1])), s)
    span.last_end = int(e[-1])


def _longest(span: SpanBusy, starts: np.ndarray, ends: np.ndarray) -> None:
    """Gaps ``[starts, ends)`` in order: the first longest kept, cut at the windows'
    edges when the job was traced only in windows (a gap never spans untraced time)."""
    if span.captured is not None:
        _, starts, ends = span.captured.cut(np.zeros(starts.shape[0], np.int64), starts, ends)
        if not starts.shape[0]:
            return
    length = ends - starts
    i = int(np.argmax(length))
    if int(length[i]) > span.gap:
        span.gap_at, span.gap = int(starts[i]), int(length[i])
