"""Synchronising calls counted in steps, with carried state (``StepCalls``), for
sync-per-step.

A process's steps are its step ranges (``ProfilerStep#N`` from torch.profiler, or host
ranges with "step" in their name: ``train_step``, NVTX ``step 12``); in a process
without any, each outermost host range (inside no other range of its thread) is taken
for a step. Which of the two a process has is known only at its end, so both are
counted. A call counts in every step whose ``[start, end]`` holds its start; a step is
done once the sweep passes its end. Carried per process: the steps still open, each
thread's reach (the latest range end so far: what makes a range outermost), and sums.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from tfprof.collector.read.engine import Read
from tfprof.collector.read.settled_chunks import Settled
from tfprof.collector.read.stall_gaps import SYNC_CALL
from tfprof.collector.read.time_chunks import Chunk

STEP_NAME = re.compile(r"^ProfilerStep#\d+$|(^|[^a-z])step([^a-z]|$)", re.IGNORECASE)
API, MARKER = 5, 6
_EMPTY = np.zeros(0, dtype=np.int64)


@dataclass
class Steps:
    """One kind of step (step ranges, or outermost ranges) of one process: what its
    synchronising calls add up to."""

    steps: int = 0
    with_calls: int = 0  # steps holding a call
    calls: int = 0  # calls counted, per step (a call in two overlapping steps: twice)
    most: int = 0  # in one step
    names: dict[int, int] = field(default_factory=dict)  # names id -> calls in a step
    first_seen: dict[int, int] = field(default_factory=dict)  # names id -> first start
    wait: int = 0  # ns of the calls in a step (each once)
    start: int = int(np.iinfo(np.int64).max)  # the first such call's start, last end
    end: int = int(np.iinfo(np.int64).min)
    # Open steps: start, end, calls so far.
    open: tuple[np.ndarray, np.ndarray, np.ndarray] = (_EMPTY, _EMPTY, _EMPTY)


@dataclass
class ProcessSteps:
    job: int
    has_calls: bool = False  # a synchronising call
    named: Steps = field(default_factory=Steps)  # step ranges
    outermost: Steps = field(default_factory=Steps)  # outermost ranges
    reach: dict[int, int] = field(default_factory=dict)  # per thread: latest range end

    @property
    def uses_named(self) -> bool:
        return bool(self.named.steps or self.named.open[0].shape[0])


@dataclass(frozen=True)
class StepCalls:
    """Sweep: a ``ProcessSteps`` per process with ranges or synchronising calls."""

    tables: frozenset[str] = frozenset({"api_calls", "markers"})
    columns: frozenset[str] = frozenset({"thread", "name"})

    def start(self, read: Read) -> _StepState:
        return _StepState(read)


class _StepState:
    def __init__(self, read: Read) -> None:
        self.read = read
        self.processes: dict[int, ProcessSteps] = {}
        self.settled = Settled()
        self._flags: dict[int, tuple[bool, bool]] = {}  # names id -> (sync call, step)

    def _named(self, name: np.ndarray, which: int) -> np.ndarray:
        ids, inverse = np.unique(name, return_inverse=True)
        new = [i for i in ids.tolist() if i not in self._flags]
        if new:
            names = self.read.names.names
            for i in new:
                text = names[i]
                self._flags[i] = (bool(SYNC_CALL.search(text)), bool(STEP_NAME.search(text)))
        flags = np.array([self._flags[i][which] for i in ids.tolist()], dtype=bool)
        out: np.ndarray = flags[inverse.reshape(-1)]
        return out

    def feed(self, chunk: Chunk) -> None:
        settled = self.settled.feed(chunk)
        if settled is None:
            return
        kind, process = settled["kind"], settled["process"]
        ranges = np.flatnonzero((kind == MARKER) & (settled["thread"] != 0))
        calls = np.flatnonzero(kind == API)
        calls = calls[self._named(settled["name"][calls], 0)]
        for p in np.unique(np.concatenate([process[ranges], process[calls]])).tolist():
            mine = self.processes.setdefault(p, ProcessSteps(self.read.processes[p].job))
            r = ranges[process[ranges] == p]
            self._ranges(mine, settled, r)
            c = calls[process[calls] == p]
            if c.shape[0]:
                mine.has_calls = True
                name = settled["name"][c]
                for steps in (mine.named, mine.outermost):
                    _count(steps, settled["s"][c], settled["e"][c], name)
        for mine in self.processes.values():
            for steps in (mine.named, mine.outermost):
                _close(steps, settled.bound)

    def _ranges(self, p: ProcessSteps, c: Chunk, rows: np.ndarray) -> None:
        if not rows.shape[0]:
            return
        s, e = c["s"][rows], c["e"][rows]
        step = self._named(c["name"][rows], 1)
        _open(p.named, s[step], e[step])
        thread = c["thread"][rows] & 0xFFFFFFFF
        top = np.zeros(rows.shape[0], dtype=bool)
        for t in np.unique(thread).tolist():
            mine = np.flatnonzero(thread == t)
            mine = mine[np.lexsort((-e[mine], s[mine]))]  # longest first at one start
            # The latest end before each range: the thread's carried reach included.
            carried = p.reach.get(t, int(np.iinfo(np.int64).min))
            reach = np.maximum.accumulate(np.concatenate(([carried], e[mine])))
            top[mine] = e[mine] > reach[:-1]
            p.reach[t] = int(reach[-1])
        _open(p.outermost, s[top], e[top])

    def finish(self) -> dict[int, ProcessSteps]:
        for mine in self.processes.values():
            for steps in (mine.named, mine.outermost):
                _close(steps, int(np.iinfo(np.int64).max))
        return self.processes


def _open(steps: Steps, s: np.ndarray, e: np.ndarray) -> None:
    o = steps.open
    steps.open = (np.concatenate([o[0], s]), np.concatenate([o[1], e]),
                  np.concatenate([o[2], np.zeros(s.shape[0], dtype=np.int64)]))  # fmt: skip


def _count(steps: Steps, s: np.ndarray, e: np.ndarray, name: np.ndarray) -> None:
    """A chunk's calls (start order): counted in each open step holding their start."""
    start, end, n = steps.open
    if not start.shape[0]:
        return
    lo = np.searchsorted(s, start, side="left")
    hi = np.searchsorted(s, end, side="right")
    n += np.maximum(hi - lo, 0)
    depth = np.zeros(s.shape[0] + 1, dtype=np.int64)
    np.add.at(depth, lo, 1)
    np.add.at(depth, np.maximum(hi, lo), -1)
    inside = np.cumsum(depth)[:-1] > 0
    if not inside.any():
        return
    ids, at, counts = np.unique(name[inside], return_index=True, return_counts=True)
    for k, t, m in zip(ids.tolist(), s[inside][at].tolist(), counts.tolist(), strict=True):
        steps.names[k] = steps.names.get(k, 0) + m
        steps.first_seen.setdefault(k, t)  # calls come in start order: the first one's
    si, ei = s[inside], e[inside]
    steps.wait += int((ei - si).sum())
    steps.start = min(steps.start, int(si.min()))
    steps.end = max(steps.end, int(ei.max()))


def _close(steps: Steps, bound: int) -> None:
    """Steps ending before ``bound`` can hold no later call: added up."""
    start, end, n = steps.open
    done = end < bound
    if not done.any():
        return
    counts = n[done]
    steps.steps += int(counts.shape[0])
    steps.with_calls += int(np.count_nonzero(counts))
    steps.calls += int(counts.sum())
    steps.most = max(steps.most, int(counts.max()))
    steps.open = (start[~done], end[~done], n[~done])
