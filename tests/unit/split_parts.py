"""A whole timeline cut into time parts, as a streamed export delivers one: every track
and counter goes on across parts, each part holding a time range of its slices.

Cuts fall at quantiles of every slice's start, so each part holds some of most tracks.
A track's slices starting in ``[cut_j, cut_j+1)`` go to part ``j``, a counter's samples
likewise. A part declares what it is the first to use: the processes of its tracks and
counters, and a track's lanes up to the highest it has used so far (all of them where
the track appears for the last time); the name table grows to the highest id used so
far. Each launch flow's start is marked in the part holding its API call, its end in
the part holding its GPU slice, with the id the whole timeline gives it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np

from tfprof.collector.timeline.model import (
    CounterTrack,
    FlowMarks,
    PartedTimeline,
    SliceTrack,
    Timeline,
    TimelinePart,
    parted,
)


@dataclass(frozen=True)
class _Cut:
    """The parts' time ranges: part ``j`` holds what starts in ``[bounds[j], bounds[j+1])``."""

    bounds: np.ndarray  # k + 1 times, the last past every event

    def part_of(self, times: np.ndarray) -> np.ndarray:
        part: np.ndarray = np.searchsorted(self.bounds, times, side="right") - 1
        return part


def split_parts(timeline: Timeline, k: int) -> PartedTimeline:
    """``timeline`` as ``k`` time parts (fewer where it has fewer distinct starts)."""
    starts = np.concatenate([t.start_ns for t in timeline.slices if len(t)] or [np.zeros(1)])
    inner = np.unique(np.quantile(starts, np.arange(1, k) / k).astype(np.int64))
    cut = _Cut(np.concatenate([[np.iinfo(np.int64).min], inner, [np.iinfo(np.int64).max]]))
    k = len(cut.bounds) - 1
    # Per track, the part each slice goes to, and the parts it appears in.
    slice_part = [cut.part_of(t.start_ns) for t in timeline.slices]
    appears = [sorted(set(p.tolist())) or [0] for p in slice_part]  # an empty track: part 0
    counter_part = [cut.part_of(c.time_ns) for c in timeline.counters]
    counter_appears = [sorted(set(p.tolist())) or [0] for p in counter_part]
    # Per part, which of the timeline's tracks it holds, at which index.
    index_in: list[dict[int, int]] = [{} for _ in range(k)]
    for t, held in enumerate(appears):
        for j in held:
            index_in[j][t] = len(index_in[j])
    first_use: dict[int, int] = {}
    for t, held in enumerate(appears):
        pid = timeline.slices[t].pid
        first_use[pid] = min(first_use.get(pid, k), held[0])
    for c, held in enumerate(counter_appears):
        pid = timeline.counters[c].pid
        first_use[pid] = min(first_use.get(pid, k), held[0])
    starts_at, ends_at = _marks(timeline, slice_part, index_in, k)

    def parts() -> Iterator[TimelinePart]:
        """Each part made as it is asked for, so a writer that lets go of it frees it."""
        lanes_seen = [0] * len(timeline.slices)
        names_seen = 0
        for j in range(k):
            slices = []
            for t in index_in[j]:
                track = timeline.slices[t]
                piece = _piece(track, np.flatnonzero(slice_part[t] == j))
                if len(piece):
                    lanes_seen[t] = max(lanes_seen[t], int(piece.lane.max()) + 1)
                    names_seen = max(names_seen, _highest_name(piece) + 1)
                lanes = track.num_lanes if j == appears[t][-1] else lanes_seen[t]
                ids, names = track.thread_ids[:lanes], track.thread_names[:lanes]
                slices.append(replace(piece, thread_ids=ids, thread_names=names))
            counters = [
                _samples(counter, np.flatnonzero(counter_part[c] == j))
                for c, counter in enumerate(timeline.counters)
                if j in counter_appears[c]
            ]
            table = timeline.names if j == k - 1 else timeline.names[:names_seen]
            processes = tuple(p for p in timeline.processes if first_use.get(p.pid, 0) == j)
            yield TimelinePart(
                table, processes, tuple(slices), tuple(counters), starts_at[j], ends_at[j]
            )

    whole = parted(timeline)
    return PartedTimeline(
        timeline.group_by,
        timeline.origin_ns,
        parts(),
        lambda: timeline.metadata,
        whole.hosts,
        whole.devices,
    )


def _piece(track: SliceTrack, sel: np.ndarray) -> SliceTrack:
    """The slices ``sel`` (a contiguous ascending run) of ``track``."""

    def cut(values: np.ndarray | None) -> np.ndarray | None:
        return None if values is None else values[sel]

    return replace(
        track,
        start_ns=track.start_ns[sel],
        duration_ns=track.duration_ns[sel],
        kind=track.kind[sel],
        name_id=track.name_id[sel],
        lane=track.lane[sel],
        rows=track.rows[sel],
        op_id=cut(track.op_id),
        category_id=cut(track.category_id),
    )


def _samples(counter: CounterTrack, sel: np.ndarray) -> CounterTrack:
    return replace(counter, time_ns=counter.time_ns[sel], values=counter.values[sel])


def _highest_name(track: SliceTrack) -> int:
    ids = [int(track.name_id.max())]
    for extra in (track.op_id, track.category_id):
        if extra is not None:
            ids.append(int(extra.max()))
    return max(ids)


def _marks(
    timeline: Timeline, slice_part: list[np.ndarray], index_in: list[dict[int, int]], k: int
) -> tuple[list[FlowMarks], list[FlowMarks]]:
    """Per part, the flow starts and ends on its slices: flow ``i`` has id ``i + 1``."""
    flows = timeline.flows
    ids = np.arange(1, len(flows) + 1, dtype=np.int64)
    out: tuple[list[FlowMarks], list[FlowMarks]] = ([], [])
    for tracks, slices, marks in (
        (flows.from_track, flows.from_slice, out[0]),
        (flows.to_track, flows.to_slice, out[1]),
    ):
        part = np.array(
            [slice_part[t][s] for t, s in zip(tracks.tolist(), slices.tolist(), strict=True)],
            dtype=np.int64,
        )
        # A slice's index within its part: its index less the slices of the track before.
        first = {
            (t, j): int(np.searchsorted(slice_part[t], j)) for t in range(len(slice_part))
            for j in range(k)
        }  # fmt: skip
        for j in range(k):
            at = np.flatnonzero(part == j)
            t = tracks[at].tolist()
            s = slices[at].tolist()
            marks.append(
                FlowMarks(
                    np.array([index_in[j][x] for x in t], dtype=np.int64),
                    np.array(
                        [y - first[(x, j)] for x, y in zip(t, s, strict=True)], dtype=np.int64
                    ),
                    ids[at],
                )
            )
    return out


__all__ = ["split_parts"]
