"""One log line per interval for events that can come by the thousand.

A hostile client (or a misconfigured fleet) can make a service refuse thousands of
connections a second; a line per refusal would fill the disk and hide everything else.
``RateLimitedLog`` writes the first event at once and then at most one line per
interval, saying how many it held back; counters elsewhere still count each event.
Shared by the node daemon and the collector; standard library only.
"""

from __future__ import annotations

import logging
import threading
import time

DEFAULT_INTERVAL_S = 10.0


class RateLimitedLog:
    """``note(what)`` logs ``what`` unless a line went out less than ``interval_s`` ago;
    the next line that does go out says how many were held back. Thread-safe."""

    def __init__(
        self,
        logger: logging.Logger,
        interval_s: float = DEFAULT_INTERVAL_S,
        level: int = logging.WARNING,
    ) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self.level = level
        self.total = 0  # every event noted, logged or not
        self._unlogged = 0
        self._last_logged = -float("inf")
        self._lock = threading.Lock()

    def note(self, what: str, now: float | None = None) -> bool:
        """Count one event; True when this call wrote the line."""
        now = time.monotonic() if now is None else now
        with self._lock:
            self.total += 1
            self._unlogged += 1
            if now - self._last_logged < self.interval_s:
                return False
            count, self._unlogged, self._last_logged = self._unlogged, 0, now
        if count == 1:
            self.logger.log(self.level, "%s", what)
        else:
            self.logger.log(
                self.level,
                "%s (%d like it in the last %.0f s, %d in all)",
                what,
                count,
                self.interval_s,
                self.total,
            )
        return True
