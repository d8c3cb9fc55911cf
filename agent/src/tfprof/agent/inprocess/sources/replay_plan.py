"""The replay's plan: where each recorded record lands, and the batches it goes in.

Cost: the chunk tables are built once per trace (short traces are tiled several loops
per block so batches stay large); each loop then only rebuilds the start and
correlation columns.
"""

from __future__ import annotations

import array
from collections.abc import Iterator
from typing import Any

from tfprof.core.records import COLUMNS, RecordKind
from tfprof.readers import RecordedTrace

CHUNK_RECORDS = 8192
PACE_WINDOW_S = 0.01
LOOP_GAP_NS = 1_000_000
_CORRELATION_MOD = (1 << 32) - 1  # correlation is uint32 on the wire; ids 1 .. 2**32-1


_numpy_module: Any = False  # False: not looked for yet; None: not installed


def _numpy() -> Any:
    """numpy if installed, imported on first use by the replay thread, not at import
    time: this module loads inside the user's process at start-up, and numpy's import is
    the slowest of ours (bench/results/cpu-design-choices.txt)."""
    global _numpy_module
    if _numpy_module is False:
        try:
            import numpy
        except ImportError:  # pragma: no cover - a dependency, but the hook must not need it
            _numpy_module = None
        else:
            _numpy_module = numpy
    return _numpy_module


def shift_starts(col: array.array[int], shift: int) -> array.array[int]:
    np = _numpy() if len(col) > 64 else None
    if np is not None:
        return array.array("q", (np.frombuffer(col, dtype=np.int64) + shift).tobytes())
    return array.array("q", [v + shift for v in col])


def shift_correlations(col: array.array[int], shift: int) -> array.array[int]:
    # Wrap within 1 .. 2**32-1 so a long replay never emits 0 ("no correlation").
    np = _numpy() if len(col) > 64 else None
    if np is not None:
        c = np.frombuffer(col, dtype=np.int64)
        out = np.where(c != 0, (c - 1 + shift) % _CORRELATION_MOD + 1, 0).astype(np.int64)
        return array.array("q", out.tobytes())
    return array.array("q", [(c - 1 + shift) % _CORRELATION_MOD + 1 if c else 0 for c in col])


class ReplayChunk:
    """One batch of a block: every column but start and correlation is final."""

    __slots__ = ("columns", "due_ns", "size")

    def __init__(self, columns: list[array.array[int]], due_ns: int) -> None:
        self.columns = columns
        self.due_ns = due_ns  # offset (within the block) of its last record
        self.size = len(columns[0])


START_COL = COLUMNS.index("start_ns")
DURATION_COL = COLUMNS.index("duration_ns")
CORRELATION_COL = COLUMNS.index("correlation")


class ReplayTiming:
    """Where a record of the trace lands: its offset stretched, loops one period apart,
    and (at max speed with repeats) time compressed N-fold, as ``ReplayPlan`` lays them out."""

    def __init__(self, span_ns: int, repeat: int, speed: float | None, stretch: float) -> None:
        self.stretch = stretch
        self.compression = repeat if speed is None else 1
        self.raw_period_ns = self.scaled(span_ns) + LOOP_GAP_NS  # one loop, uncompressed
        self.period_ns = -(-self.raw_period_ns // self.compression)  # rounded up
        self.repeat = repeat

    def scaled(self, ns: int) -> int:
        return ns if self.stretch == 1 else round(ns * self.stretch)

    def at(self, loop: int, offset: int, per_block: int) -> int:
        """Replayed time (from ``t0``) of a record at stretched ``offset`` in ``loop``
        (``per_block`` loops are tiled per block, as ``ReplayPlan`` does)."""
        within = loop % per_block * self.raw_period_ns + offset
        return loop // per_block * per_block * self.period_ns + within // self.compression


class ReplayPlan:
    """Chunk tables for one block of ``loops_per_block`` back-to-back loops, built once."""

    def __init__(
        self,
        trace: RecordedTrace,
        names: array.array[int],
        timing: ReplayTiming,
        loops_per_block: int,
        speed: float | None,
    ) -> None:
        n = len(trace)
        repeat = self.repeat = timing.repeat
        # Time compression at max with repeats (see the module docstring).
        self.compression = timing.compression
        self.period_ns = timing.raw_period_ns
        correlation = trace.column("correlation")
        self.has_correlation = any(correlation)
        self.correlation_stride = max(correlation, default=0)
        # Tile short traces so a batch carries ~CHUNK_RECORDS records, not one loop's few.
        self.loops_per_block = loops_per_block
        k = self.loops_per_block
        block: list[array.array[int]] = []
        for col_name in COLUMNS:
            base = trace.column(col_name)
            if col_name == "name":
                base = array.array("q", [names[i] for i in base])
            elif col_name == "category":  # a MARKER's category is a string too
                kinds = trace.column("kind")
                base = array.array(
                    "q", [names[c] if k == RecordKind.MARKER else c for k, c in zip(kinds, base)]
                )
            elif col_name == "collective":  # and so is a collective's description
                base = array.array("q", [names[c] if c else 0 for c in base])
            elif col_name in ("start_ns", "duration_ns") and timing.stretch != 1:
                base = array.array("q", [timing.scaled(v) for v in base])
            if col_name == "start_ns":
                tiled = array.array("q")
                for j in range(k):
                    tiled.extend(shift_starts(base, j * self.period_ns))
            elif col_name == "correlation" and self.has_correlation:
                tiled = array.array("q", base)
                for j in range(1, k):
                    tiled.extend(shift_correlations(base, j * self.correlation_stride))
            else:
                tiled = base * k
            block.append(tiled)
        if self.compression > 1:
            c = self.compression
            block[START_COL] = array.array("q", [v // c for v in block[START_COL]])
            # A record keeps at least 1 ns: a zero duration would read as an instant.
            block[DURATION_COL] = array.array(
                "q", [max(1, v // c) if v else 0 for v in block[DURATION_COL]]
            )
            self.period_ns = timing.period_ns  # rounded up: loops never overlap
        window_ns = None if speed is None else int(PACE_WINDOW_S * 1e9 * speed)
        self._full = chunk_block(block, len(block[0]), window_ns)
        rest = repeat % k
        self._partial = chunk_block(block, rest * n, window_ns) if rest else []

    def blocks(self) -> Iterator[tuple[int, list[ReplayChunk]]]:
        """(index of the block's first loop, its chunks) for every block, in order."""
        k = self.loops_per_block
        full_blocks = self.repeat // k
        for b in range(full_blocks):
            yield b * k, self._full
        if self._partial:
            yield full_blocks * k, self._partial


def chunk_block(
    block: list[array.array[int]], limit: int, window_ns: int | None
) -> list[ReplayChunk]:
    """Split the first ``limit`` records of a block into batches by count and trace time."""
    starts = block[START_COL]
    chunks: list[ReplayChunk] = []
    lo = 0
    while lo < limit:
        hi = min(limit, lo + CHUNK_RECORDS)
        if window_ns is not None:
            edge = starts[lo] + window_ns
            for i in range(lo + 1, hi):  # starts are sorted
                if starts[i] >= edge:
                    hi = i
                    break
        chunks.append(ReplayChunk([col[lo:hi] for col in block], starts[hi - 1]))
        lo = hi
    return chunks


def loops_per_block(records: int, repeat: int) -> int:
    return max(1, min(repeat, CHUNK_RECORDS // max(1, records)))
