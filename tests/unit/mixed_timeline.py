"""A large timeline of mixed tracks and the Chrome events expected of it, row by row."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from tfprof.collector.export.args import arg_columns
from tfprof.collector.jobdata import RECORD_COLUMNS, JobData, StreamData
from tfprof.collector.merged.whole import WholeTimeline as Timeline
from tfprof.collector.merged.whole import build_timeline
from tfprof.core.cupti_labels import PEER_COPY
from tfprof.core.records import RecordKind
from tfprof.core.slice_args import CATEGORIES

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


def mixed_timeline(n: int, seed: int = 5) -> Timeline:
    """Every kind, names of many lengths (escapes, non-ASCII), peer copies, zero-length
    slices, negative and huge arg values, overlapping slices (lanes).

    Built through the engine from values the lake stores, then the built tracks are
    given what no stored record can hold but a writer must still write: int64 extremes
    and negative values in their args, a kind this version does not know."""
    rng = np.random.default_rng(seed)
    cols = {c: rng.integers(0, 1 << 16, n) for c in RECORD_COLUMNS}
    kinds = [RecordKind.KERNEL, RecordKind.MEMCPY, RecordKind.MEMSET, RecordKind.SYNC]
    cols["kind"] = np.asarray(kinds)[rng.integers(0, len(kinds), n)]
    cols["start_ns"] = 1_700_000_000_000_000_000 + np.sort(rng.integers(0, 10**10, n))
    cols["duration_ns"] = rng.integers(0, 10**7, n) * rng.integers(0, 2, n)
    cols["stream"] = rng.integers(0, 3, n)
    cols["device"] = rng.integers(0, 2, n)
    for c in ("copy_kind", "src_kind", "dst_kind", "sync_type", "memory_op", "category"):
        cols[c] = rng.integers(0, 1 << 8, n)
    cols["copy_kind"] = rng.choice([1, 2, 8, PEER_COPY, 99], n)
    cols["correlation"] = np.arange(1, n + 1)  # a slice's twin on the memcpy track shares it
    names = [f'k{i}{"x" * (i * 7 % 90)}"\\\nü' for i in range(40)]
    cols["name"] = rng.integers(1, len(names) + 1, n)
    stream = StreamData("j", "r", "h", 1, "0", strings=["", *names], records=cols)
    timeline = build_timeline([JobData("j", "r", [stream])])
    correlation = rng.integers(INT64_MIN, INT64_MAX, n + 1, dtype=np.int64)
    odd = rng.random(n + 1) < 0.2
    sync_type = rng.integers(-1, 6, n + 1)
    registers = rng.integers(-5, 5, n + 1)
    tracks = []
    for track in timeline.slices:
        records = {c: v.astype(np.int64) for c, v in track.records.items()}
        of = records["correlation"][track.rows]  # each record's own draws, on both tracks
        records["correlation"][track.rows] = correlation[of]
        records["sync_type"][track.rows] = sync_type[of]
        records["registers"][track.rows] = registers[of]
        records["static_smem"][track.rows[of % 7 == 0]] = INT64_MAX
        kind = np.where(odd[of], 42, track.kind)
        records["kind"][track.rows] = kind
        tracks.append(replace(track, records=records, kind=kind))
    return replace(timeline, slices=tuple(tracks))


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
