"""Unions of intervals per key, fed in start order a chunk at a time, handing out each
island as it closes: what pieces that measure islands against spans or gaps need
(``carried_unions.Unions`` adds them up instead).

An island closes when a later interval of its key starts after its reach (touching
intervals merge; a zero-length interval opens an island of its own), so every island
but each key's last is known, in start order, once the chunk after it is fed; the last
ones come out at ``finish``.
"""

from __future__ import annotations

import numpy as np

from tfprof.collector.read.carried_unions import NONE, islands

_EMPTY = np.zeros(0, dtype=np.int64)
Islands = tuple[np.ndarray, np.ndarray, np.ndarray]  # key, start, end; in (key, start) order


class IslandStream:
    """Per dense key below ``n``: the island still open (start and reach)."""

    def __init__(self) -> None:
        self.n = 0
        self.open_start = _EMPTY.copy()  # NONE: no island yet
        self.reach = _EMPTY.copy()

    def grow(self, n_keys: int) -> None:
        more = n_keys - self.n
        if more > 0:
            self.open_start = np.append(self.open_start, np.full(more, NONE, np.int64))
            self.reach = np.append(self.reach, np.full(more, NONE, np.int64))
            self.n = n_keys

    def feed(self, key: np.ndarray, s: np.ndarray, e: np.ndarray) -> Islands:
        """One chunk's intervals (``s`` ascending): the islands they closed."""
        if not s.shape[0]:
            return _EMPTY, _EMPTY, _EMPTY
        self.grow(int(key.max()) + 1)
        carried = np.flatnonzero(self.open_start != NONE)
        k = np.concatenate([carried, key.astype(np.int64, copy=False)])
        order = np.argsort(k, kind="stable")  # each key's carried island first
        k = k[order]
        s = np.concatenate([self.open_start[carried], s])[order]
        e = np.concatenate([self.reach[carried], e])[order]
        ik, ist, ien = islands(k, s, e)
        last = np.append(ik[1:] != ik[:-1], True)
        self.open_start[ik[last]] = ist[last]
        self.reach[ik[last]] = ien[last]
        closed = ~last
        return ik[closed], ist[closed], ien[closed]

    def finish(self) -> Islands:
        """The islands still open, closed: every island has then been handed out."""
        keys = np.flatnonzero(self.open_start != NONE)
        out = keys, self.open_start[keys].copy(), self.reach[keys].copy()
        self.open_start[keys] = NONE
        self.reach[keys] = NONE
        return out
