"""The distributed Kineto traces HTA's tests ship, and a rank's trace stretched in time."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"
DIST = TRACES / "kineto-hta-dist"


def stretched(src: Path, dst: Path, rank: int, factor: float) -> None:
    """``src`` as rank ``rank``, its times stretched by ``factor`` around its first event
    (what ``--replay-stretch`` does to a replayed rank)."""
    with gzip.open(src, "rt") as fh:
        trace = json.load(fh)
    trace["distributedInfo"] = {**trace.get("distributedInfo", {}), "rank": rank}
    events = trace["traceEvents"]
    origin = min(e["ts"] for e in events if isinstance(e.get("ts"), int | float))
    for e in events:
        if isinstance(e.get("ts"), int | float):
            e["ts"] = origin + (e["ts"] - origin) * factor
        if isinstance(e.get("dur"), int | float):
            e["dur"] = e["dur"] * factor
    with gzip.open(dst, "wt") as fh:
        json.dump(trace, fh)  # ", " and ": ": HTA finds the rank by '"rank":\s+'
