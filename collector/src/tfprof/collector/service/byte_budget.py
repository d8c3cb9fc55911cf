"""A semaphore on bytes for the event loop: bounds the batch bytes being parsed and stored.

A stream holds its batch's size from the moment it was read until it is acknowledged;
while the budget is spent, a stream waits before it reads its next message, so gRPC's
HTTP/2 flow control makes its agent wait too, instead of the collector's memory growing
with the number of streams sending at once. Waiters are served first come, first served
(a large batch is not starved by small ones); a batch larger than the whole budget runs
alone.
"""

from __future__ import annotations

import asyncio
import collections


class ByteBudget:
    """Used from one event loop only; not thread-safe (it need not be)."""

    def __init__(self, limit: int) -> None:
        if limit <= 0:
            raise ValueError("the byte budget must be positive")
        self.limit = limit
        self.held = 0
        self._waiters: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()

    @property
    def waiting(self) -> int:
        """Streams waiting for bytes now."""
        return len(self._waiters)

    def _fits(self, nbytes: int) -> bool:
        return self.held + nbytes <= self.limit or self.held == 0

    async def acquire(self, nbytes: int) -> None:
        if not self._waiters and self._fits(nbytes):
            self.held += nbytes
            return
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (nbytes, granted)
        self._waiters.append(entry)
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self.release(nbytes)  # granted just as we were cancelled: hand it on
            else:
                self._waiters.remove(entry)
                self._grant()  # we may have been the head that others waited behind
            raise

    def release(self, nbytes: int) -> None:
        self.held -= nbytes
        self._grant()

    def _grant(self) -> None:
        while self._waiters and self._fits(self._waiters[0][0]):
            nbytes, granted = self._waiters.popleft()
            self.held += nbytes
            granted.set_result(None)
