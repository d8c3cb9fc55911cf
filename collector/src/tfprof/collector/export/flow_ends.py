"""Launch flows as the writers draw them: where each end of an arrow lies.

A flow's id is the same in every format: unique in the whole export however many jobs
and processes it merges (CUPTI's correlation ids are unique only within a process), and
never 0 (``merged.host_links`` numbers them). The arrow starts on the API call's slice
and ends on the GPU slice it launched, each on the lane (thread) its slice was drawn on;
each end is marked in the part that holds its slice (``TimelinePart.starts``, ``ends``).

Chrome JSON draws an arrow from two events placed on the slices' threads at their start
(``FlowEnds``); Perfetto marks the two slices themselves (``TrackFlows``: which slices of
a track start or end which flows).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tfprof.collector.timeline.model import FlowMarks, TimelinePart

_SLICE_BITS = 40  # a (track, slice) pair as one sortable key: slice indices stay below 2**40


@dataclass(frozen=True)
class FlowEnds:
    """One end of every flow: the process, thread and start time of its slice."""

    pid: np.ndarray
    tid: np.ndarray
    start_ns: np.ndarray


def flow_ends(part: TimelinePart, tracks: np.ndarray, slices: np.ndarray) -> FlowEnds:
    """Where the slices ``slices[i]`` of ``part.slices[tracks[i]]`` lie."""
    n = tracks.shape[0]
    pid = np.empty(n, dtype=np.int64)
    tid = np.empty(n, dtype=np.int64)
    start = np.empty(n, dtype=np.int64)
    for t in np.unique(tracks).tolist():
        track = part.slices[t]
        at = np.flatnonzero(tracks == t)
        mine = np.take(slices, at)
        lanes = np.asarray(track.thread_ids, dtype=np.int64)
        pid[at] = track.pid
        tid[at] = np.take(lanes, np.take(track.lane, mine))
        start[at] = np.take(track.start_ns, mine)
    return FlowEnds(pid, tid, start)


@dataclass(frozen=True)
class ChunkFlows:
    """The flows a run of slices ``[a, b)`` of one track starts and ends.

    ``out_rows[k]`` (slice - a, ascending, repeated when a call launched several records:
    a graph launch) starts flow ``out_ids[k]``; ``in_ids[r]`` is the flow slice ``a + r``
    ends, 0 for none (a GPU record is launched by one call at most).
    """

    out_rows: np.ndarray
    out_ids: np.ndarray
    in_ids: np.ndarray

    def rows(self, index: np.ndarray) -> ChunkFlows:
        """The flows of the slices ``index`` (ascending) of the run, numbered as they are
        in ``index``."""
        at = np.full(self.in_ids.shape[0], -1, dtype=np.int64)
        at[index] = np.arange(index.shape[0])
        out = at[self.out_rows]
        kept = out >= 0
        return ChunkFlows(out[kept], self.out_ids[kept], self.in_ids[index])

    def out_counts(self) -> np.ndarray:
        """How many flows each slice starts."""
        counts: np.ndarray = np.bincount(self.out_rows, minlength=self.in_ids.shape[0])
        return counts


class TrackFlows:
    """For each track of a part, which of its slices start and end which flows (sorted
    lookups)."""

    def __init__(self, starts: FlowMarks, ends: FlowMarks) -> None:
        self._out_keys, self._out_ids = _sorted_keys(starts.track, starts.slice, starts.id)
        self._in_keys, self._in_ids = _sorted_keys(ends.track, ends.slice, ends.id)

    def __bool__(self) -> bool:
        return bool(self._out_keys.shape[0] or self._in_keys.shape[0])

    def chunk(self, track: int, a: int, b: int) -> ChunkFlows:
        """The flows slices ``[a, b)`` of track ``track`` start and end."""
        base = track << _SLICE_BITS
        lo, hi = np.searchsorted(self._out_keys, [base + a, base + b])
        out_rows = self._out_keys[lo:hi] - (base + a)
        out_ids = self._out_ids[lo:hi]
        lo, hi = np.searchsorted(self._in_keys, [base + a, base + b])
        in_ids = np.zeros(b - a, dtype=np.int64)
        in_ids[self._in_keys[lo:hi] - (base + a)] = self._in_ids[lo:hi]
        return ChunkFlows(out_rows, out_ids, in_ids)

    def wide(self, track: int, limit: int) -> np.ndarray:
        """The slices of ``track`` that start more than ``limit`` flows, ascending."""
        base = track << _SLICE_BITS
        lo, hi = np.searchsorted(self._out_keys, [base, base + (1 << _SLICE_BITS)])
        slices, counts = np.unique(self._out_keys[lo:hi] - base, return_counts=True)
        wide: np.ndarray = slices[counts > limit]
        return wide


def _sorted_keys(
    tracks: np.ndarray, slices: np.ndarray, ids: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    keys = (tracks.astype(np.int64) << _SLICE_BITS) | slices.astype(np.int64)
    order = np.argsort(keys, kind="stable")
    return keys[order], ids[order]


__all__ = ["ChunkFlows", "FlowEnds", "TrackFlows", "flow_ends"]
