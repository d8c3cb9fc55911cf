"""Where a process traced in capture windows (on demand, periodically) recorded nothing:
the spans between its windows, drawn as slices of their own (``untraced``) on a track
of the task's host process, so an empty stretch is never read as an idle GPU. Every
format shows them (they are MARKER slices of a host track); a task traced throughout
has none.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tfprof.collector.jobdata import RECORD_COLUMNS, StreamData
from tfprof.collector.timeline.captured_time import captured_of
from tfprof.collector.timeline.layout import Layout
from tfprof.collector.timeline.model import SliceTrack
from tfprof.collector.timeline.prepare import NameTable, TimeWindow
from tfprof.core.records import RecordKind
from tfprof.core.tracks import TrackKey

UNTRACED = "untraced (outside the capture windows)"


def untraced_track(
    streams: Sequence[StreamData],
    host: str,
    job: str,
    task: str,
    window: TimeWindow,
    layout: Layout,
    names: NameTable,
    origin: int,
) -> SliceTrack | None:
    """The spans between a task's capture windows (its ``streams``'), as slices on a
    host track of their own (``untraced``) of its ``host`` process. None for a task
    traced throughout."""
    captured = captured_of(streams)
    if captured is None or captured.starts.shape[0] < 2:
        return None
    start, end = captured.ends[:-1], captured.starts[1:]
    lo = window.lo if window.lo is not None else int(start.min())
    hi = window.hi if window.hi is not None else int(end.max())
    start, end = np.maximum(start, lo), np.minimum(end, hi)
    keep = end > start
    start, end = start[keep], end[keep]
    n = int(start.shape[0])
    if not n:
        return None
    pid, tids, _ = layout.place_thread(host, 0, 1)
    zeros = np.zeros(n, dtype=np.int64)
    return SliceTrack(
        pid=pid,
        key=TrackKey.for_thread(job, task, 0),
        thread_ids=tids,
        thread_names=("untraced",),
        start_ns=start - np.int64(origin),
        duration_ns=end - start,
        kind=np.full(n, RecordKind.MARKER, dtype=np.int8),
        name_id=np.full(n, names.intern(UNTRACED), dtype=np.int32),
        lane=np.zeros(n, dtype=np.int32),
        rows=np.arange(n),
        records={c: zeros for c in RECORD_COLUMNS},
        category_id=np.full(n, -1, dtype=np.int64),
    )
