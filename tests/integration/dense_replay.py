"""The densest shipped TF timeline, replayed in loops by capture tests, and its widest gap."""

from __future__ import annotations

import itertools

from tfprof.agent.inprocess.sources.replay_plan import LOOP_GAP_NS
from tfprof.readers import load_trace

DENSE = "tf-timeline-ikhlestov/GPU_timeline_03_merged_5_runs.json"  # 221 records / 0.14 s


def widest_gap(path: str) -> int:
    """The longest stretch without a record start when ``path`` is replayed in loops."""
    trace = load_trace(path)
    starts = sorted(trace.column("start_ns"))
    loop_gap = trace.span_ns - (starts[-1] - starts[0]) + LOOP_GAP_NS
    return max([b - a for a, b in itertools.pairwise(starts)] + [loop_gap])
