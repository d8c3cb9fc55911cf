"""A large timeline of mixed tracks and the Chrome events expected of it, row by row."""

from __future__ import annotations

from typing import Any

import numpy as np

from tfprof.collector.export.args import arg_columns
from tfprof.collector.jobdata import RECORD_COLUMNS, JobData, StreamData
from tfprof.collector.timeline.build import build_timeline
from tfprof.collector.timeline.model import Timeline
from tfprof.core.cupti_labels import PEER_COPY
from tfprof.core.records import RecordKind
from tfprof.core.slice_args import CATEGORIES

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


def mixed_timeline(n: int, seed: int = 5) -> Timeline:
    """Every kind, names of many lengths (escapes, non-ASCII), peer copies, zero-length
    slices, negative and huge arg values, overlapping slices (lanes)."""
    rng = np.random.default_rng(seed)
    cols = {c: rng.integers(0, 1 << 20, n) for c in RECORD_COLUMNS}
    kinds = [RecordKind.KERNEL, RecordKind.MEMCPY, RecordKind.MEMSET, RecordKind.SYNC, 42]
    cols["kind"] = np.asarray(kinds)[rng.integers(0, len(kinds), n)]
    cols["start_ns"] = 1_700_000_000_000_000_000 + np.sort(rng.integers(0, 10**10, n))
    cols["duration_ns"] = rng.integers(0, 10**7, n) * rng.integers(0, 2, n)
    cols["stream"] = rng.integers(0, 3, n)
    cols["device"] = rng.integers(0, 2, n)
    cols["copy_kind"] = rng.choice([1, 2, 8, PEER_COPY, 99], n)
    cols["sync_type"] = rng.integers(-1, 6, n)
    cols["registers"] = rng.integers(-5, 5, n)
    cols["correlation"] = rng.integers(INT64_MIN, INT64_MAX, n, dtype=np.int64)
    cols["static_smem"][::7] = INT64_MAX
    names = [f'k{i}{"x" * (i * 7 % 90)}"\\\nü' for i in range(40)]
    cols["name"] = rng.integers(1, len(names) + 1, n)
    stream = StreamData("j", "r", "h", 1, "0", strings=["", *names], records=cols)
    return build_timeline([JobData("j", "r", [stream])])


def expected_events(timeline: Timeline) -> list[dict[str, Any]]:
    """Each slice as a dict, from the timeline's columns and ``args.arg_columns``."""
    events = []
    for track in timeline.slices:
        for kind in [*CATEGORIES, None]:
            mask = (
                track.kind == kind if kind is not None else ~np.isin(track.kind, list(CATEGORIES))
            )
            sel = np.flatnonzero(mask)
            columns = arg_columns(track, kind, sel)
            for i, row in enumerate(sel.tolist()):
                args: dict[str, Any] = {}
                for column in columns:
                    if column.where is None:
                        args[column.arg.name] = column.values[i]
                    elif i in column.where.tolist():
                        args[column.arg.name] = column.values[column.where.tolist().index(i)]
                events.append(
                    {
                        "name": timeline.names[int(track.name_id[row])],
                        "pid": track.pid,
                        "tid": track.thread_ids[int(track.lane[row])],
                        "ts": int(track.start_ns[row]) / 1000.0,
                        "dur": int(track.duration_ns[row]) / 1000.0,
                        "args": args,
                    }
                )
    return events
