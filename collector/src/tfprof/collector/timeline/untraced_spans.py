"""Where a process traced in capture windows (on demand, periodically) recorded nothing:
the spans between its windows, drawn as slices of their own (``untraced``) on a track
of the task's host process, so an empty stretch is never read as an idle GPU. Every
format shows them (they are MARKER slices of a host track); a task traced throughout
has none.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tfprof.collector.jobdata import StreamData
from tfprof.collector.timeline.captured_time import captured_of
from tfprof.collector.timeline.prepare import TimeWindow

UNTRACED = "untraced (outside the capture windows)"
UNTRACED_THREAD = "untraced"  # the track's one lane, on thread 0 of the task's host


def untraced_spans(
    streams: Sequence[StreamData], window: TimeWindow
) -> tuple[np.ndarray, np.ndarray] | None:
    """(start, end) of each span between a task's capture windows (its ``streams``'),
    cut to ``window``, on the collector clock. None for a task traced throughout."""
    captured = captured_of(streams)
    if captured is None or captured.starts.shape[0] < 2:
        return None
    start, end = captured.ends[:-1], captured.starts[1:]
    lo = window.lo if window.lo is not None else int(start.min())
    hi = window.hi if window.hi is not None else int(end.max())
    start, end = np.maximum(start, lo), np.minimum(end, hi)
    keep = end > start
    if not keep.any():
        return None
    return start[keep], end[keep]
