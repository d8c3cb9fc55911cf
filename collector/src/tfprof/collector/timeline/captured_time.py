"""Captured time: the windows a set of processes was traced in, as disjoint intervals,
and what interval work needs of them: how much of an interval lies inside (busy time
counts only there), the pieces of an interval inside (an idle gap never spans untraced
time), and the captured length of a span (idle and busy percentages are of it).

A process traced throughout (capture mode ``always``, an agent that predates capture
windows, an imported trace) has no bound: ``captured_of`` is then None, and every
figure is that of the whole window, as before windows were known.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from tfprof.collector.jobdata import StreamData
from tfprof.collector.store.traced_windows import follows_windows


class Captured:
    """Disjoint, sorted ``[start, end)`` intervals."""

    def __init__(self, starts: np.ndarray, ends: np.ndarray) -> None:
        self.starts, self.ends = starts, ends
        length = ends - starts
        self._before = np.concatenate(([0], np.cumsum(length)))  # captured ns before each

    @classmethod
    def union(cls, windows: Iterable[tuple[int, int]]) -> Captured:
        pairs = sorted((a, b) for a, b in windows if b > a)
        starts: list[int] = []
        ends: list[int] = []
        for a, b in pairs:
            if ends and a <= ends[-1]:
                ends[-1] = max(ends[-1], b)
            else:
                starts.append(a)
                ends.append(b)
        return cls(np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64))

    def windows(self) -> list[tuple[int, int]]:
        return list(zip(self.starts.tolist(), self.ends.tolist(), strict=True))

    def before(self, t: np.ndarray) -> np.ndarray:
        """Captured ns before each instant."""
        at = np.searchsorted(self.starts, t, side="right") - 1
        inside = np.clip(t - self.starts[np.maximum(at, 0)], 0, None)
        inside = np.minimum(inside, (self.ends - self.starts)[np.maximum(at, 0)])
        out: np.ndarray = np.where(at >= 0, self._before[np.maximum(at, 0)] + inside, 0)
        return out

    def measure(self, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Per interval, its captured length."""
        if not self.starts.shape[0]:
            return np.zeros(start.shape[0], dtype=np.int64)
        out: np.ndarray = self.before(end) - self.before(start)
        return out

    def total(self, lo: int, hi: int) -> int:
        """Captured ns of ``[lo, hi)``."""
        return int(self.measure(np.array([lo]), np.array([max(lo, hi)]))[0])

    def cut(
        self, key: np.ndarray, start: np.ndarray, end: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The pieces of each ``[start, end)`` inside the windows: (key, start, end)."""
        if not start.shape[0] or not self.starts.shape[0]:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, empty
        first = np.searchsorted(self.ends, start, side="right")  # first window ending after
        last = np.searchsorted(self.starts, end, side="left")  # windows starting before end
        count = np.maximum(last - first, 0)
        row = np.repeat(np.arange(start.shape[0]), count)
        window = np.arange(row.shape[0]) - np.repeat(np.cumsum(count) - count, count)
        window += first[row]
        s = np.maximum(start[row], self.starts[window])
        e = np.minimum(end[row], self.ends[window])
        keep = e > s
        return key[row][keep], s[keep], e[keep]


def captured_of(streams: Sequence[StreamData]) -> Captured | None:
    """The windows the streams were traced in; None when one was traced throughout."""
    windows = []
    for stream in streams:
        rows = stream.capture_windows
        if not rows or any(not follows_windows(mode) for mode, _, _, _ in rows):
            return None
        windows += [(a, b) for _, _, a, b in rows]
    return Captured.union(windows)
