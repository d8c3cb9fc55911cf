"""Host time as the agent sees it, and its offset to the collector's clock.

``now_ns`` is the host's realtime clock, plus the test-only skew of the configuration
(``AgentConfig.clock_skew_ns``, set once per process through ``set_skew``), so tests can
show that merge aligns hosts through the estimated offset. Imported inside user
processes: stdlib only.
"""

from __future__ import annotations

import time

_skew_ns = 0


def set_skew(skew_ns: int) -> None:
    """Apply the configuration's clock skew (0 outside tests) to ``now_ns``."""
    global _skew_ns
    _skew_ns = skew_ns


def now_ns() -> int:
    return time.time_ns() + _skew_ns


def offset_from_probe(t1: int, t2: int, t3: int, t4: int) -> tuple[int, int]:
    """NTP: (offset to add to local time to get the server's, round trip)."""
    return ((t2 - t1) + (t3 - t4)) // 2, (t4 - t1) - (t3 - t2)
