"""Host time as the agent sees it, and its offset to the collector's clock.

``now_ns`` is the host's realtime clock. ``TFPROF_TEST_CLOCK_SKEW_NS`` (tests only)
pretends this host's clock is off by that much, so tests can show that merge aligns
hosts through the estimated offset. Imported inside user processes: stdlib only.
"""

from __future__ import annotations

import os
import time

_SKEW_ENV = "TFPROF_TEST_CLOCK_SKEW_NS"


def _read_skew() -> int:
    try:
        return int(os.environ.get(_SKEW_ENV, "0") or 0)
    except ValueError:
        return 0


SKEW_NS = _read_skew()


def now_ns() -> int:
    return time.time_ns() + SKEW_NS


def offset_from_probe(t1: int, t2: int, t3: int, t4: int) -> tuple[int, int]:
    """NTP: (offset to add to local time to get the server's, round trip)."""
    return ((t2 - t1) + (t3 - t4)) // 2, (t4 - t1) - (t3 - t2)
