"""Several outputs' bytes in one temporary file: for writers whose units span parts.

An XPlane line or a StepStats device is one message, written whole and led by its
length; with a timeline delivered a part at a time, its content comes in pieces (a
track continued across parts), between other lines' and devices'. Each piece goes to
the end of one temporary file as it is encoded (``Spool.write``), remembered by offset
and size (``Spooled``); at the end a writer knows every unit's size and copies each
unit's pieces out in order (``Spool.copy``). Memory holds the pieces' index, not their
bytes (kept in memory up to ``SPOOL_BYTES``, then on disk).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from types import TracebackType

from tfprof.collector.export.output import BinaryOutput

# Spooled bytes kept in memory up to this, then in a temporary file. The buffer is
# copied when it rolls over, so a larger one raises the export's peak
# (bench/results/cpu-export-parts.txt).
SPOOL_BYTES = 16 << 20
_COPY_BLOCK = 1 << 20


@dataclass
class Spooled:
    """One unit's pieces in the spool, in order: (offset, size); ``size`` in all."""

    pieces: list[tuple[int, int]] = field(default_factory=list)
    size: int = 0


class Spool:
    """A temporary file that units' pieces are appended to, then copied out unit by unit."""

    def __init__(self, max_size: int = SPOOL_BYTES) -> None:
        # Closed when the spool is (``with Spool() as spool``): it outlives any one block.
        self._file = tempfile.SpooledTemporaryFile(max_size=max_size)  # noqa: SIM115
        self._end = 0

    def __enter__(self) -> Spool:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._file.close()

    def write(self, unit: Spooled, data: bytes) -> None:
        """Append ``data`` to ``unit``'s content."""
        if not data:
            return
        self._file.seek(self._end)  # a copy may have moved the position
        self._file.write(data)
        pieces = unit.pieces
        if pieces and sum(pieces[-1]) == self._end:  # right after its last piece: one piece
            offset, size = pieces[-1]
            pieces[-1] = (offset, size + len(data))
        else:
            pieces.append((self._end, len(data)))
        unit.size += len(data)
        self._end += len(data)

    def copy(self, unit: Spooled, out: BinaryOutput) -> None:
        """Write ``unit``'s content to ``out``."""
        for offset, size in unit.pieces:
            self._file.seek(offset)
            while size:
                block = self._file.read(min(size, _COPY_BLOCK))
                if not block:
                    raise OSError("the spooled bytes ended early")
                out.write(block)
                size -= len(block)


__all__ = ["SPOOL_BYTES", "Spool", "Spooled"]
