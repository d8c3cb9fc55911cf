"""Chunks whose rows are all settled: every row starting at the same instant as one of
them is in the same chunk or an earlier one.

A chunk's ``bound`` says no later row starts before it, so a later chunk may still
hold rows that start exactly at ``bound``, as the chunk's last rows may. Pieces that ask
"what started at or before t" (the innermost range open when a call began, the latest
range of a node) need every row starting at t first: ``Settled`` holds a chunk's rows
starting at its bound back and hands them on with the next chunk.
"""

from __future__ import annotations

import numpy as np

from tfprof.collector.read.time_chunks import NEVER, Chunk


class Settled:
    """Re-cuts a component's chunks (``feed`` them in order) so that no instant is split
    between two; a component's last chunk (bound ``NEVER``) flushes what is held."""

    def __init__(self) -> None:
        self._held: dict[str, np.ndarray] | None = None

    def feed(self, chunk: Chunk) -> Chunk | None:
        """The rows of ``chunk`` (and those held before) that start before its bound;
        None when there are none yet."""
        columns = chunk.columns
        if self._held is not None:
            held, self._held = self._held, None
            columns = {c: np.concatenate([held[c], v]) for c, v in columns.items()}
        if chunk.bound == NEVER:
            return Chunk(columns, NEVER) if columns["s"].shape[0] else None
        cut = int(np.searchsorted(columns["s"], chunk.bound, side="left"))
        if cut < columns["s"].shape[0]:
            self._held = {c: v[cut:] for c, v in columns.items()}
        if not cut:
            return None
        return Chunk({c: v[:cut] for c, v in columns.items()}, chunk.bound)
