"""Queue depth at launch with carried state: per CUDA stream of a link group, how many
records were launched before a record and had not started when its call began (HTA's
queue length less the record itself; the tests' whole-process oracle,
tests/unit/whole_launches.py, counts it the same way).

A stream runs its work in launch order, so "launched before and not yet started" is
"launched before" less "started by then", never below zero: per stream, the launch
times (call starts) and start times of its linked records are counted. Both only grow
at the front of the time the sweep has reached, so each is a sorted array appended to
(``_Sorted``); what lies before every later question's instant (``prune``: the oldest
call a record can still link to) is dropped and kept as a count.
"""

from __future__ import annotations

import numpy as np

from tfprof.collector.read.gpu_sweeps import DenseIds


class _Sorted:
    """A sorted int64 array grown at its end (merged when a value comes out of order),
    dropped from its front; ``dropped`` counts what went."""

    def __init__(self) -> None:
        self._buf = np.zeros(1024, dtype=np.int64)
        self._head = 0
        self._tail = 0
        self.dropped = 0

    @property
    def values(self) -> np.ndarray:
        return self._buf[self._head : self._tail]

    def add(self, new: np.ndarray) -> None:
        if not new.shape[0]:
            return
        new = np.sort(new)
        held = self.values
        if held.shape[0] and int(new[0]) < int(held[-1]):
            merged = np.sort(np.concatenate([held, new]), kind="stable")
            self._buf, self._head, self._tail = merged, 0, merged.shape[0]
            return
        if self._tail + new.shape[0] > self._buf.shape[0]:
            size = max(2 * (held.shape[0] + new.shape[0]), 1024)
            buf = np.zeros(size, dtype=np.int64)
            buf[: held.shape[0]] = held
            self._buf, self._head, self._tail = buf, 0, held.shape[0]
        self._buf[self._tail : self._tail + new.shape[0]] = new
        self._tail += new.shape[0]

    def count(self, t: np.ndarray, side: str) -> np.ndarray:
        """Values < t (``left``) or <= t (``right``), the dropped ones included."""
        found: np.ndarray = np.searchsorted(self.values, t, side=side) + self.dropped  # type: ignore[call-overload]
        return found

    def drop(self, t: int, side: str) -> None:
        """Drop the values < t (``left``) or <= t (``right``)."""
        k = int(np.searchsorted(self.values, t, side=side))  # type: ignore[call-overload]
        self._head += k
        self.dropped += k


class LaunchQueues:
    """Per stream (any int64 code: link group, device, stream), its linked records'
    launch and start times so far."""

    def __init__(self) -> None:
        self.ids = DenseIds()
        self._launched: list[_Sorted] = []
        self._started: list[_Sorted] = []

    def depth(self, stream: np.ndarray, launched: np.ndarray, started: np.ndarray) -> np.ndarray:
        """Per linked record of a chunk (its stream's code, its call's start, its own
        start): the queue depth when its call began. The chunk's records are counted
        before any is asked about, as the whole-process rule counts every record."""
        out = np.zeros(stream.shape[0], dtype=np.int64)
        if not stream.shape[0]:
            return out
        ids = self.ids(stream)
        while len(self._launched) < len(self.ids):
            self._launched.append(_Sorted())
            self._started.append(_Sorted())
        for i in np.unique(ids).tolist():
            mine = np.flatnonzero(ids == i)
            a = launched[mine]
            self._launched[i].add(a)
            self._started[i].add(started[mine])
            before = self._launched[i].count(a, "left")
            begun = self._started[i].count(a, "right")
            out[mine] = np.maximum(before - begun, 0)
        return out

    def prune(self, before: int) -> None:
        """Every later question asks about an instant at ``before`` or later: what lies
        before it counts alike for all of them."""
        for launched, started in zip(self._launched, self._started, strict=True):
            launched.drop(before, "left")
            started.drop(before, "right")
