"""The hook's bounded frame queue: frames wait here between the source and the sender."""

from __future__ import annotations

import collections
import threading


class FrameQueue:
    """Bounded by bytes; ``put`` never blocks unless asked to. Each frame carries the
    number of records in it, so frames that can no longer be sent are counted."""

    def __init__(self, max_bytes: int) -> None:
        self._frames: collections.deque[tuple[bytes, int]] = collections.deque()
        self._bytes = 0
        self._max = max_bytes
        self._cond = threading.Condition()
        self.closed = False

    def put(self, frame: bytes, wait: bool = False, force: bool = False, records: int = 0) -> bool:
        with self._cond:
            while not force and self._bytes + len(frame) > self._max and self._frames:
                if not wait or self.closed:
                    return False
                self._cond.wait(0.1)
            if self.closed and not force:
                return False
            self._frames.append((frame, records))
            self._bytes += len(frame)
            self._cond.notify_all()
            return True

    def take(self, timeout: float) -> tuple[bytes, int] | None:
        """The next frame and the records in it; None when there is none in time."""
        with self._cond:
            if not self._frames and not self.closed:
                self._cond.wait(timeout)
            if not self._frames:
                return None
            frame, records = self._frames.popleft()
            self._bytes -= len(frame)
            self._cond.notify_all()
            return frame, records

    def put_back(self, frame: bytes, records: int) -> None:
        """Return a taken frame to the front (its send broke off): it goes first on the
        next connection, even into a closed or full queue (it was counted in already)."""
        with self._cond:
            self._frames.appendleft((frame, records))
            self._bytes += len(frame)
            self._cond.notify_all()

    def get(self, timeout: float) -> bytes | None:
        taken = self.take(timeout)
        return None if taken is None else taken[0]

    def discard(self) -> int:
        """Close and empty the queue; the records the discarded frames held."""
        with self._cond:
            self.closed = True
            records = sum(n for _, n in self._frames)
            self._frames.clear()
            self._bytes = 0
            self._cond.notify_all()
            return records

    def close(self) -> None:
        with self._cond:
            self.closed = True
            self._cond.notify_all()

    def __len__(self) -> int:
        return len(self._frames)
