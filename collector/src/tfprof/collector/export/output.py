"""What every reporter writes to, how much it builds at a time, and the threads that
finish and write its blocks."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType
from typing import IO, Any, Protocol

CHUNK_EVENTS = 1 << 13  # small enough to stay in cache, large enough to amortise numpy
PIPELINE_DEPTH = 4  # blocks that may wait to be finished or written
# What XPlane and StepStats spool (lines, devices: messages led by their length, written
# once complete) stays in memory up to this, then goes to a temporary file.
SPOOL_BYTES = 16 << 20


class BinaryOutput(Protocol):
    """Where a reporter writes: an open binary file, a GzipFile, a BytesIO."""

    def write(self, data: bytes | memoryview, /) -> Any: ...


# Finishes a block: returns its bytes.
Finish = Callable[[], bytes | memoryview]
# Turns a finished block into what is written (a compressor), on the writing thread.
Then = Callable[[bytes | memoryview], bytes | memoryview]


class BlockPipeline:
    """Blocks finished on one thread and written on another, in the order they were put,
    while the caller prepares the next ones.

    numpy's bulk copies and arithmetic, a file's ``write`` and gzip's deflate let go of
    the GIL, so on two cores the three stages overlap: the wall time is about that of
    the slowest, not their sum. At most ``depth`` blocks wait, so memory stays bounded.
    The first error of either thread is raised by the next ``put`` or on leaving the
    ``with`` block; an error in the caller drops the blocks still waiting.
    """

    def __init__(self, outfile: BinaryOutput, depth: int = PIPELINE_DEPTH) -> None:
        self._outfile = outfile
        self._depth = max(1, depth)
        self._finish = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tfprof-finish")
        self._write = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tfprof-write")
        self._waiting: deque[Future[None]] = deque()
        self._failed = False  # set on the writing thread only

    def put(self, finish: Finish, skip: int = 0, then: Then | None = None) -> None:
        """Write what ``finish()`` returns, less its first ``skip`` bytes (and passed
        through ``then`` on the writing thread), after every block put before it."""
        finished = self._finish.submit(finish)
        self._waiting.append(self._write.submit(self._write_when_done, finished, skip, then))
        while len(self._waiting) > self._depth:
            self._waiting.popleft().result()

    def _write_when_done(
        self, finished: Future[bytes | memoryview], skip: int, then: Then | None
    ) -> None:
        if self._failed:  # a block is missing: nothing after it may be written
            raise RuntimeError("an earlier block failed")
        try:
            data = finished.result()
            data = memoryview(data)[skip:] if skip else data
            self._outfile.write(data if then is None else then(data))
        except BaseException:
            self._failed = True
            raise

    def close(self) -> None:
        """Wait until every block is written (raising the first error)."""
        try:
            while self._waiting:
                self._waiting.popleft().result()
        finally:
            self._shutdown(cancel=True)

    def _shutdown(self, cancel: bool) -> None:
        self._finish.shutdown(wait=True, cancel_futures=cancel)
        self._write.shutdown(wait=True, cancel_futures=cancel)
        self._waiting.clear()

    def __enter__(self) -> BlockPipeline:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self._shutdown(cancel=True)


def copy_spooled(spool: IO[bytes], dst: BinaryOutput, offset: int, size: int) -> None:
    """``size`` bytes of ``spool`` from ``offset`` into ``dst``, a block at a time."""
    spool.seek(offset)
    while size:
        block = spool.read(min(size, 1 << 20))
        if not block:
            raise OSError("the spooled output ended early")
        dst.write(block)
        size -= len(block)
