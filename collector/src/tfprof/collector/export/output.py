"""What every reporter writes to, and how much it builds at a time."""

from __future__ import annotations

from typing import Any, Protocol

CHUNK_EVENTS = 1 << 13  # small enough to stay in cache, large enough to amortise numpy


class BinaryOutput(Protocol):
    """Where a reporter writes: an open binary file, a GzipFile, a BytesIO."""

    def write(self, data: bytes | memoryview, /) -> Any: ...
