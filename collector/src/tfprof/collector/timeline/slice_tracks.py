"""Each track's slices in start order with lanes, and the ``SliceTrack`` they become."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from tfprof.collector.jobdata import RECORD_COLUMNS
from tfprof.collector.timeline.lanes import assign_lanes
from tfprof.collector.timeline.layout import Layout
from tfprof.collector.timeline.merge_tasks import NamedSource, TrackData, TrackParts
from tfprof.collector.timeline.model import SliceTrack
from tfprof.core.records import RecordKind
from tfprof.core.tracks import TrackKey

PARALLEL_SLICES = 1 << 16  # tracks holding more are ordered and laned on two threads


def tracks_data(tracks: Sequence[tuple[TrackKey, TrackParts]], origin: int) -> list[TrackData]:
    """``track_data`` of each track, in order; on two threads when there is much to do
    (numpy's gathers and sorts let go of the GIL)."""
    sizes = [sum(idx.shape[0] for _, _, idx in parts) for _, parts in tracks]
    if len(tracks) < 2 or sum(sizes) < PARALLEL_SLICES:
        return [track_data(parts, origin) for _, parts in tracks]
    with ThreadPoolExecutor(2, thread_name_prefix="tfprof-merge") as pool:
        return list(pool.map(lambda track: track_data(track[1], origin), tracks))


def track_data(parts: TrackParts, origin: int) -> TrackData:
    """One track's slices from its parts, in start order, with lanes.

    A track normally comes from one stream and refers to its columns by row (each
    column gathered once, already in start order: a host thread's track holds most of
    a process's records); the rare track fed by several streams of one process (a
    reconnect) gets its columns copied.
    """
    if len(parts) == 1:
        s_index, source, idx = parts[0]
        prep = source.prep
        start = prep.start[idx]
        if start.shape[0] > 1 and not (start[1:] >= start[:-1]).all():
            order = np.argsort(start, kind="stable")
            idx, start = idx[order], start[order]
            del order
        end = prep.end[idx]
        kind, name = source.kind[idx], source.name[idx]
        return finish_track(
            start, end, kind, name, prep.rows(idx), prep.stream.records,
            s_index, idx, markers_only(kind, source.category, idx), origin,
        )  # fmt: skip
    records = {
        c: np.concatenate([s.prep.stream.records[c][s.prep.rows(idx)] for _, s, idx in parts])
        for c in RECORD_COLUMNS
    }
    rows = np.arange(records["kind"].shape[0])
    start = np.concatenate([s.prep.start[idx] for _, s, idx in parts])
    end = np.concatenate([s.prep.end[idx] for _, s, idx in parts])
    kind = np.concatenate([s.kind[idx] for _, s, idx in parts])
    name = np.concatenate([s.name[idx] for _, s, idx in parts])
    category = markers_only(
        kind,
        np.concatenate([categories(s)[idx] for _, s, idx in parts]),
        slice(None),
    )
    part = np.concatenate([np.full(idx.shape[0], i, dtype=np.int64) for i, _, idx in parts])
    kept = np.concatenate([idx for _, _, idx in parts])
    if start.shape[0] > 1 and not (start[1:] >= start[:-1]).all():
        order = np.argsort(start, kind="stable")
        start, end, kind, name, rows, part, kept = (
            a[order] for a in (start, end, kind, name, rows, part, kept)
        )
        category = None if category is None else category[order]
    return finish_track(start, end, kind, name, rows, records, part, kept, category, origin)


def finish_track(
    start: np.ndarray,
    end: np.ndarray,
    kind: np.ndarray,
    name: np.ndarray,
    rows: np.ndarray,
    records: Mapping[str, np.ndarray],
    part: np.ndarray | int,
    kept: np.ndarray,
    category: np.ndarray | None,
    origin: int,
) -> TrackData:
    lane, num_lanes = assign_lanes(start, end)
    end -= start  # the durations, in place: a track's columns are its own copies
    start -= np.int64(origin)
    return TrackData(start, end, kind, name, lane, num_lanes, rows, records, part, kept,
                      category)  # fmt: skip


def categories(source: NamedSource) -> np.ndarray:
    if source.category is None:
        return np.full(source.kind.shape[0], -1, dtype=np.int32)
    return source.category


def markers_only(
    kind: np.ndarray, category: np.ndarray | None, idx: np.ndarray | slice
) -> np.ndarray | None:
    """The track's category ids, or None when it holds no MARKER (most tracks)."""
    if category is None or not (kind == RecordKind.MARKER).any():
        return None
    picked: np.ndarray = category[idx]
    return picked


def slice_track(
    key: TrackKey, parts: TrackParts, data: TrackData, layout: Layout, host: str
) -> SliceTrack:
    first = parts[0][1].prep.stream
    if key.is_host:
        pid, tids, thread_names = layout.place_thread(host, key.thread, data.num_lanes)
    else:
        meta = first.devices.get(key.gpu)
        pid, tids, thread_names = layout.place_slices(
            key.format(), data.num_lanes, first.device_uuid(key.gpu), meta.name if meta else ""
        )
    return SliceTrack(
        pid=pid,
        key=key,
        thread_ids=tids,
        thread_names=thread_names,
        start_ns=data.start,
        duration_ns=data.duration,
        kind=data.kind,
        name_id=data.name,
        lane=data.lane,
        rows=data.rows,
        records=data.records,
        op_id=None if key.is_host else np.full(len(data.start), -1, dtype=np.int64),
        category_id=data.category,
    )
