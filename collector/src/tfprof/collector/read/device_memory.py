"""Device memory levels with carried state: per (job, physical GPU) the bytes its
processes hold (MEMORY records: +bytes per allocation, -bytes per release,
``timeline.memory_levels.memory_deltas``), the running level's peak and when it was
first reached, allocations and releases counted, and optionally a coarse timeline (the
highest level in each of ``points`` equal slices of the window).

The level at the window's start comes from every record before it (``BEFORE``, SQL over
the whole run); records in the window come in start order, a chunk at a time, and what
is carried is one level per key and per slice. The timeline needs the window's end
before the first chunk: a read whose other sweeps read no GPU table (the memory view)
knows it (``Read.ends_known``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tfprof.collector.read.engine import Read
from tfprof.collector.read.needs import Query
from tfprof.collector.read.refs import GpuRef
from tfprof.collector.read.time_chunks import Chunk
from tfprof.collector.timeline.memory_levels import MEMORY_ALLOCATION, MEMORY_RELEASE

MEMORY = 7
# Per (job, process, CUDA ordinal): bytes allocated less released before the window.
BEFORE = Query(
    f"SELECT job, process, device, sum(CASE memory_op WHEN {MEMORY_ALLOCATION} THEN bytes "
    f"WHEN {MEMORY_RELEASE} THEN -bytes ELSE 0 END) FROM {{h_all}} "
    "WHERE kind = 7 AND s < {lo} GROUP BY ALL"
)


@dataclass
class Level:
    """One (job, GPU)'s device memory over the window."""

    job: int
    gpu: GpuRef
    start: int  # held when the window began
    level: int = 0  # held now (at the end, once the sweep is over)
    peak: int = 0
    peak_at: int = 0  # when the peak was first reached (the window's start: never above)
    allocations: int = 0
    releases: int = 0
    timeline: list[int] = field(default_factory=list)  # the highest level per slice
    held: list[int] = field(default_factory=list)  # per slice: the level at its start
    inside: list[int] = field(default_factory=list)  # and the highest level inside it


@dataclass(frozen=True)
class MemoryLevels:
    """Sweep: a ``Level`` per (job, GPU) with memory records or memory held before the
    window, in (job, UUID) order."""

    points: int = 0
    tables: frozenset[str] = frozenset({"memory"})
    columns: frozenset[str] = frozenset({"device", "bytes", "memory_op"})
    queries: tuple[Query, ...] = (BEFORE,)

    def start(self, read: Read) -> _MemoryState:
        if self.points and not read.ends_known:
            raise ValueError("a memory timeline needs the window's end before the sweep")
        return _MemoryState(read, self.points)


class _MemoryState:
    def __init__(self, read: Read, points: int) -> None:
        self.read = read
        lo, hi = read.start_ns, max(read.end_ns - read.start_ns, 1)
        self.bounds = [lo + hi * i // points for i in range(points + 1)] if points else []
        self.levels: dict[tuple[int, str], Level] = {}
        for job, process, device, held in read.rows(BEFORE):
            if held:
                self._level(int(job), int(process), int(device)).start += int(held)
        for level in self.levels.values():
            self._reset(level)
        for key in [k for k, v in self.levels.items() if not v.start]:
            del self.levels[key]  # as the memory view always had it: none held, no row

    def _level(self, job: int, process: int, ordinal: int) -> Level:
        stream = self.read.cat.streams[process]
        uuid = stream.device_uuid(ordinal)
        found = self.levels.get((job, uuid))
        if found is None:
            meta = stream.devices.get(ordinal)
            gpu = GpuRef(uuid, meta.name if meta else "", meta.memory_bytes if meta else 0)
            found = self.levels[(job, uuid)] = Level(job, gpu, 0)
            self._reset(found)
        return found

    def _reset(self, level: Level) -> None:
        level.level = level.peak = level.start
        level.peak_at = self.read.start_ns
        points = max(len(self.bounds) - 1, 0)
        level.timeline = [level.start] * points
        level.held = [level.start] * points
        level.inside = [level.start] * points  # never above what the slice starts with

    def feed(self, chunk: Chunk) -> None:
        process, device = chunk["process"], chunk["device"]
        op, nbytes, time = chunk["memory_op"], chunk["bytes"], chunk["s"]
        delta = np.where(
            op == MEMORY_ALLOCATION, nbytes, np.where(op == MEMORY_RELEASE, -nbytes, 0)
        )
        job_of = np.array([p.job for p in self.read.processes], dtype=np.int64)
        pairs = np.unique(np.stack([process.astype(np.int64), device]), axis=1)
        keys: dict[int, tuple[Level, list[tuple[int, int]]]] = {}
        for p, d in pairs.T.tolist():
            level = self._level(int(job_of[p]), p, d)
            keys.setdefault(id(level), (level, []))[1].append((p, d))
        for level, members in keys.values():
            mine = np.zeros(process.shape[0], dtype=bool)
            for p, d in members:
                mine |= (process == p) & (device == d)
            self._add(level, time[mine], delta[mine], op[mine])

    def _add(self, level: Level, time: np.ndarray, delta: np.ndarray, op: np.ndarray) -> None:
        before = level.level
        after = before + np.cumsum(delta)
        level.level = int(after[-1])
        level.allocations += int(np.count_nonzero(op == MEMORY_ALLOCATION))
        level.releases += int(np.count_nonzero(op == MEMORY_RELEASE))
        top = int(np.argmax(after))
        if int(after[top]) > level.peak:
            level.peak, level.peak_at = int(after[top]), int(time[top])
        last = len(level.held) - 1
        for i in range(len(level.held)):
            t0, t1 = self.bounds[i], self.bounds[i + 1]
            upto = int(np.searchsorted(time, t0, side="right"))  # events at or before t0
            if upto:
                level.held[i] = int(after[upto - 1])
                level.inside[i] = level.held[i]
            inside = int(np.searchsorted(time, t1, side="right" if i == last else "left"))
            if inside > upto:
                level.inside[i] = max(level.inside[i], int(after[upto:inside].max()))

    def finish(self) -> list[Level]:
        for level in self.levels.values():
            level.timeline = [max(h, i) for h, i in zip(level.held, level.inside, strict=True)]
        return [self.levels[k] for k in sorted(self.levels)]
