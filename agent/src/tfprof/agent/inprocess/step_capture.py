"""Capture by steps: a window that opens and closes at this process's step boundaries.

``tfprof-collector capture --steps N --skip-steps K`` sends every matching process a
request stamped with the instant it was made. Each process opens its window at its first
step boundary at least half a step after that instant, skipping K more, and closes it N
boundaries later, so it records N whole steps. The half-step guard makes ranks that run
a little ahead of or behind each other pick the same step: the request falls near some
boundary of a synchronous job, and ranks on either side of that boundary would otherwise
disagree about which one is "next".

Boundaries are the starts of steps: the zero-code step markers report them as they
happen (``StepWindows.boundary``); a source that knows them ahead (replay, from the
trace's ``ProfilerStep#N`` ranges) gives them all at once (``plan``). Imported inside
user processes: standard library only.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Iterable
from typing import NamedTuple

# Boundaries kept to estimate the step period (their median gap).
HISTORY = 17


class StepRequest(NamedTuple):
    capture_id: str
    after_ns: int  # the request's instant, host realtime clock
    steps: int  # N: whole steps to record
    skip: int  # K: boundaries to let pass first
    deadline_ns: int  # no window opens, nor stays open, past this


class Span(NamedTuple):
    """A step window [start, end); ``opened``: it waits for its closing boundary, and
    ends at the request's deadline unless one comes."""

    start_ns: int
    end_ns: int
    opened: bool = False


def median_gap(boundaries: Iterable[int]) -> int:
    """The median gap between consecutive boundaries (0 with fewer than two)."""
    times = sorted(boundaries)
    gaps = sorted(b - a for a, b in zip(times, times[1:]))
    return gaps[len(gaps) // 2] if gaps else 0


def plan(request: StepRequest, boundaries: Iterable[int], period_ns: int) -> Span | None:
    """The window ``request`` gets from boundaries known ahead (sorted), or None when
    they run out before its N steps end or it would open past the deadline."""
    threshold = request.after_ns + period_ns // 2
    count, start = 0, None
    for t in boundaries:
        if t < threshold:
            continue
        count += 1
        if count == request.skip + 1:
            if t > request.deadline_ns:
                return None
            start = t
        if start is not None and count == request.skip + 1 + request.steps:
            return Span(start, min(t, request.deadline_ns))
    return None


class _Pending:
    __slots__ = ("count", "request", "start", "threshold")

    def __init__(self, request: StepRequest, threshold: int) -> None:
        self.request = request
        self.threshold = threshold
        self.count = 0
        self.start: int | None = None


class StepWindows:
    """Step-window requests of one process, fed the boundaries as they happen.

    ``boundary`` returns the windows it opened or closed as (capture id, span); the
    caller puts them on its capture schedule. Thread-safe: boundaries come from the
    training thread, requests from the capture thread."""

    def __init__(self) -> None:
        self._recent: collections.deque[int] = collections.deque(maxlen=HISTORY)
        self._pending: dict[str, _Pending] = {}
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def seen(self, capture_id: str) -> bool:
        """Whether a request with this id came already (the collector resends open
        captures to streams that say hello again)."""
        with self._lock:
            if capture_id in self._seen:
                return True
            self._seen.add(capture_id)
            return False

    def period_ns(self) -> int:
        with self._lock:
            return median_gap(self._recent)

    def add(self, request: StepRequest) -> None:
        with self._lock:
            guard = median_gap(self._recent) // 2
            self._pending[request.capture_id] = _Pending(request, request.after_ns + guard)

    def boundary(self, t_ns: int) -> list[tuple[str, Span]]:
        """A step starts at ``t_ns``: the windows it opens or closes."""
        changed: list[tuple[str, Span]] = []
        with self._lock:
            self._recent.append(t_ns)
            for capture_id, p in list(self._pending.items()):
                r = p.request
                if t_ns < p.threshold:
                    continue
                if t_ns > r.deadline_ns:  # never opened, or its deadline closed it
                    del self._pending[capture_id]
                    continue
                p.count += 1
                if p.count == r.skip + 1:
                    p.start = t_ns
                    changed.append((capture_id, Span(t_ns, r.deadline_ns, opened=True)))
                if p.start is not None and p.count == r.skip + 1 + r.steps:
                    del self._pending[capture_id]
                    changed.append((capture_id, Span(p.start, t_ns)))
        return changed
