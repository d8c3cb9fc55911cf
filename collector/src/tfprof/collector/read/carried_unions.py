"""Interval unions over records fed in start order, a chunk at a time, with carried
state: per key (a GPU, a CUDA stream, a job on a GPU) the island still open (its start
and reach), the busy time of the islands closed so far, the longest idle gaps, and the
union's length before given instants (how much of each copy a kernel covered).

The definitions are the whole-column rules' exactly (the tests' oracle,
tests/unit/whole_intervals.py): an interval opens a new island when
it starts after every earlier one of its key has ended (touching intervals merge; a
zero-length record opens an island of its own, splitting a gap); busy is the islands'
summed length; gaps lie between consecutive islands, before the first (from the
window's start) and after the last (to its end), a key without any island is one gap,
only gaps of at least 1 ns count, and the longest are ranked by length, then start.
With captured time (keys traced only in windows), gaps are cut at the windows' edges,
and what a record captured in a window ran past its edge is told apart (``outside``):
captured time is the windows plus that. What is carried between chunks is O(keys + gaps kept
+ instants not yet answerable).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tfprof.collector.timeline.captured_time import Captured

NONE = int(np.iinfo(np.int64).min)
NEVER = int(np.iinfo(np.int64).max)
_EMPTY = np.zeros(0, dtype=np.int64)


def firsts(k: np.ndarray) -> np.ndarray:
    """Where a run of equal values begins (``k`` grouped)."""
    first = np.empty(k.shape[0], dtype=bool)
    if k.shape[0]:
        first[0] = True
        np.not_equal(k[1:], k[:-1], out=first[1:])
    return first


def _reach(first: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Each row's reach (the latest end so far in its key, its own included), rows
    grouped by key (``first`` marks each group's first row), in start order within."""
    base = int(s.min()) - 1
    span = int(e.max()) - base + 1
    rank = np.cumsum(first) - 1
    if (int(rank[-1]) + 1) * span < (1 << 62):
        offset = rank * span  # keys kept apart in one running maximum
        run: np.ndarray = offset + (e - base)
        np.maximum.accumulate(run, out=run)
        run -= offset
        run += base
        return run
    # A chunk whose keys x time span would overflow (carried islands of a trace spanning
    # years): one running maximum per key.
    run = e.copy()
    bounds = np.append(np.flatnonzero(first), first.shape[0])
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        np.maximum.accumulate(run[a:b], out=run[a:b])
    return run


def islands(k: np.ndarray, s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, ...]:
    """The union per key of intervals sorted by (key, start): (key, start, end) per
    island, in (key, start) order."""
    first = firsts(k)
    run = _reach(first, s, e)
    head = first.copy()
    np.greater(s[1:], run[:-1], out=head[1:], where=~first[1:])
    heads = np.flatnonzero(head)
    tails = np.append(heads[1:] - 1, k.shape[0] - 1)
    return k[heads], s[heads], run[tails]


class Unions:
    """The union of intervals per key, fed a chunk at a time in start order.

    ``lo``/``hi``: the window the gaps are measured in (``hi`` needed at ``finish``
    only). Keys are dense ints below ``n`` (``grow`` makes room for more).
    """

    def __init__(
        self,
        n_keys: int = 0,
        lo: int = 0,
        hi: int = 0,
        top_gaps: int = 0,
        captured: Callable[[int], Captured | None] | None = None,
    ) -> None:
        self.n = 0
        self.lo, self.hi, self.top = lo, hi, top_gaps
        # Per key, the windows it was traced in (None: throughout): a gap never spans time
        # outside them; busy time is the records' whole (``outside``: what ran past them).
        self._captured = captured
        self._sets: list[Captured] = []
        self._set_of = np.zeros(0, dtype=np.int64)  # per key: index into _sets, -1 none
        self.open_start = _EMPTY.copy()  # per key: NONE, no island yet
        self.reach = _EMPTY.copy()
        self.closed = _EMPTY.copy()  # busy ns of the islands closed so far
        self.inside = _EMPTY.copy()  # of it, inside the key's windows (keys with windows)
        self.outside = _EMPTY.copy()  # after ``finish``: busy ns outside the windows
        self.grow(n_keys)
        self._gaps = (_EMPTY, _EMPTY, _EMPTY)  # key, start, length: the longest so far
        self._asked: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.answers = _EMPTY.copy()  # per slot: what ``ask`` added up

    def grow(self, n_keys: int) -> None:
        """Room for keys numbered as they are found."""
        more = n_keys - self.n
        if more > 0:
            self.open_start = np.append(self.open_start, np.full(more, NONE, np.int64))
            self.reach = np.append(self.reach, np.full(more, NONE, np.int64))
            self.closed = np.append(self.closed, np.zeros(more, np.int64))
            self.inside = np.append(self.inside, np.zeros(more, np.int64))
            sets = [self._set(k) for k in range(self.n, n_keys)]
            self._set_of = np.append(self._set_of, np.array(sets, dtype=np.int64))
            self.n = n_keys

    def _set(self, key: int) -> int:
        found = self._captured(key) if self._captured is not None else None
        if found is None:
            return -1
        for i, known in enumerate(self._sets):
            if known is found:
                return i
        self._sets.append(found)
        return len(self._sets) - 1

    def _measure(self, key: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
        """Each interval's length inside its key's windows."""
        length: np.ndarray = e - s
        if not self._sets:
            return length
        which = self._set_of[key]
        for i, captured in enumerate(self._sets):
            mine = which == i
            if mine.any():
                length[mine] = captured.measure(s[mine], e[mine])
        return length

    def _cut(
        self, key: np.ndarray, s: np.ndarray, e: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each interval's pieces inside its key's windows (gaps between them)."""
        if not self._sets:
            return key, s, e
        which = self._set_of[key]
        parts = [(key[which < 0], s[which < 0], e[which < 0])]
        for i, captured in enumerate(self._sets):
            mine = which == i
            if mine.any():
                parts.append(captured.cut(key[mine], s[mine], e[mine]))
        k, a, b = (np.concatenate(c) for c in zip(*parts, strict=True))
        return k, a, b

    def feed(self, key: np.ndarray, s: np.ndarray, e: np.ndarray, bound: int) -> None:
        """One chunk's rows (``s`` ascending); every later row starts at ``bound`` or later."""
        ik, ist, ien = _EMPTY, _EMPTY, _EMPTY
        closed_before = self.closed.copy()
        if s.shape[0]:
            # Each key's open island first (it started before anything in the chunk),
            # then the rows by key, start order kept: one stable sort, a radix sort when
            # the keys fit 16 bits.
            carried = np.flatnonzero(self.open_start != NONE)
            k = np.concatenate([carried, key.astype(np.int64, copy=False)])
            order = np.argsort(k.astype(np.int16) if self.n < (1 << 15) else k, kind="stable")
            k = k[order]
            s = np.concatenate([self.open_start[carried], s])[order]
            e = np.concatenate([self.reach[carried], e])[order]
            del order
            ik, ist, ien = islands(k, s, e)
            last = np.append(ik[1:] != ik[:-1], True)
            done = ~last
            np.add.at(self.closed, ik[done], (ien - ist)[done])
            if self._sets:
                np.add.at(self.inside, ik[done], self._measure(ik[done], ist[done], ien[done]))
            if self.top:
                inner = np.flatnonzero(~last)  # a gap after each island but a key's last
                fresh = firsts(ik) & (self.open_start[ik] == NONE)  # a key's first ever
                self._keep_gaps(
                    np.concatenate([ik[inner], ik[fresh]]),
                    np.concatenate([ien[inner], np.full(int(fresh.sum()), self.lo)]),
                    np.concatenate([ist[inner + 1], ist[fresh]]),
                )
            self.open_start[ik[last]] = ist[last]
            self.reach[ik[last]] = ien[last]
        self._answer(bound, ik, ist, ien, closed_before)

    def _keep_gaps(self, key: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
        key, start, end = self._cut(key, start, end)
        length = end - start
        ok = length >= 1
        gk, gs, gl = (
            np.concatenate([old, new[ok]])
            for old, new in zip(self._gaps, (key, start, length), strict=True)
        )
        order = np.lexsort((gs, -gl, gk))
        gk, gs, gl = gk[order], gs[order], gl[order]
        at = np.arange(gk.shape[0])
        rank = at - np.maximum.accumulate(np.where(firsts(gk), at, 0))
        keep = rank < self.top
        self._gaps = (gk[keep], gs[keep], gl[keep])

    def ask(self, key: np.ndarray, t: np.ndarray, slot: np.ndarray, sign: int) -> None:
        """Add ``sign`` x the key's busy time before ``t`` to ``answers[slot]`` once no
        row still to come can change it (rows starting at or after ``t`` add nothing).
        Ask before feeding the chunk whose rows the instants belong to."""
        self._asked.append(
            (key.astype(np.int64), t.astype(np.int64), slot.astype(np.int64) * 2 + int(sign < 0))
        )

    def _answer(
        self,
        bound: int,
        ik: np.ndarray,
        ist: np.ndarray,
        ien: np.ndarray,
        closed_before: np.ndarray,
    ) -> None:
        """Answer what was asked of instants up to ``bound`` from this chunk's islands
        (a key's first one may be the island carried in) and the open islands of keys
        the chunk did not touch."""
        if not self._asked:
            return
        qk, qt, qs = (np.concatenate(c) for c in zip(*self._asked, strict=True))
        ready = qt <= bound
        self._asked = [(qk[~ready], qt[~ready], qs[~ready])] if not ready.all() else []
        qk, qt, qs = qk[ready], qt[ready], qs[ready]
        if not qk.shape[0]:
            return
        untouched = np.setdiff1d(np.flatnonzero(self.open_start != NONE), ik)
        ik = np.concatenate([ik, untouched])
        ist = np.concatenate([ist, self.open_start[untouched]])
        ien = np.concatenate([ien, self.reach[untouched]])
        sign = np.where(qs % 2 == 1, -1, 1)
        if not ik.shape[0]:  # no island anywhere yet: nothing covered since the last
            np.add.at(self.answers, qs // 2, sign * closed_before[qk])
            return
        order = np.lexsort((ist, ik))
        ik, ist, ien = ik[order], ist[order], ien[order]
        length = ien - ist
        # Busy before each island: the key's total before the chunk, then its islands'.
        cum = np.cumsum(length) - length
        start_of_key = np.maximum.accumulate(np.where(firsts(ik), np.arange(ik.shape[0]), 0))
        before = closed_before[ik] + cum - cum[start_of_key]
        # The island each instant falls in or after: per key, by start (searchsorted
        # over (key, start) pairs without combining them into one number).
        at = _last_at_or_before(ik, ist, qk, qt)
        a = np.maximum(at, 0)
        mine = (at >= 0) & (ik[a] == qk)
        value = np.where(mine, before[a] + np.clip(qt - ist[a], 0, length[a]), closed_before[qk])
        np.add.at(self.answers, qs // 2, sign * value)

    def finish(self) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Busy ns per key, and each key's longest gaps (key, start, length), ranked."""
        self.feed(_EMPTY, _EMPTY, _EMPTY, NEVER)
        has = self.open_start != NONE
        keys = np.arange(self.n)
        busy = self.closed + np.where(has, self.reach - self.open_start, 0)
        inside = self.inside.copy()
        inside[has] += self._measure(keys[has], self.open_start[has], self.reach[has])
        # A record captured in a window may run past its edge: busy counts it whole, and
        # so does the captured time the busy share is of (windows plus what ran past).
        self.outside = np.where(self._set_of >= 0, busy - inside, 0) if self._sets else busy * 0
        if self.top:
            self._keep_gaps(
                keys, np.where(has, self.reach, self.lo), np.full(self.n, self.hi, dtype=np.int64)
            )
        return busy, self._gaps


def _last_at_or_before(
    ik: np.ndarray, ist: np.ndarray, qk: np.ndarray, qt: np.ndarray
) -> np.ndarray:
    """For each (qk, qt), the index of the last (ik, ist) pair <= it in (key, start)
    order (``ik``, ``ist`` sorted so), -1 when none."""
    key_lo = np.searchsorted(ik, qk, side="left")
    key_hi = np.searchsorted(ik, qk, side="right")
    out = np.full(qk.shape[0], -1, dtype=np.int64)
    for key in np.unique(qk).tolist():
        mine = np.flatnonzero(qk == key)
        a, b = int(key_lo[mine[0]]), int(key_hi[mine[0]])
        found = np.searchsorted(ist[a:b], qt[mine], side="right") - 1
        out[mine] = np.where(found >= 0, a + found, np.where(a > 0, a - 1, -1))
    return out
