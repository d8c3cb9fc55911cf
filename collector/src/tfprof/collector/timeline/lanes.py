"""Lane assignment: split overlapping slices of one track into non-overlapping lanes.

Same rule as tf.timeline's ``_assign_lanes``: walk the slices in start order and put each
one on the first lane whose last slice has ended (end <= start), opening a new lane when
none has. Slices on one CUDA stream rarely overlap, so the common case is answered with
numpy alone; only clusters of mutually overlapping slices go through Python.

Those are given lanes one lane at a time: lane 0 takes the first slice, then the first
slice that starts once it has ended, and so on (a ``searchsorted`` finds each slice's
successor, a walk follows them); the slices it leaves get lanes 1, 2, ... the same way
among themselves, exactly what the greedy walk over all lanes gives. A track with many
lanes (many copies at once) finishes with a heap walk over the slices left.
Crowded slices go a batch of whole clusters at a time (a host thread's nested ranges are
nearly all crowded: millions of them at once as Python lists took hundreds of MB).
"""

from __future__ import annotations

import heapq

import numpy as np

FIRST_FIT_BATCH = 1 << 16  # crowded slices given lanes at once (whole clusters), about


def assign_lanes(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, int]:
    """Lane of each slice (int32) and the number of lanes used.

    ``start`` must be sorted ascending; ``end >= start`` element-wise.
    """
    n = int(start.shape[0])
    lane = np.zeros(n, dtype=np.int32)
    if n == 0:
        return lane, 0
    # A slice that starts after every earlier slice has ended finds all lanes free, so
    # greedy assignment restarts from scratch there: the track splits into independent
    # clusters, and a cluster of one slice always lands on lane 0.
    ended_before = np.maximum.accumulate(end)
    fresh = np.empty(n, dtype=bool)
    fresh[0] = True
    np.greater_equal(start[1:], ended_before[:-1], out=fresh[1:])
    if fresh.all():
        return lane, 1
    cluster = np.cumsum(fresh) - 1
    sizes = np.bincount(cluster)
    crowded = np.flatnonzero(sizes[cluster] > 1)
    # Batches end where a cluster starts: each batch's loop starts afresh, as it would.
    firsts = np.flatnonzero(fresh[crowded])
    at = np.searchsorted(firsts, np.arange(FIRST_FIT_BATCH, crowded.shape[0], FIRST_FIT_BATCH))
    cuts = np.unique(firsts[at[at < firsts.shape[0]]]).tolist()
    for a, b in zip([0, *cuts], [*cuts, crowded.shape[0]], strict=True):
        rows = crowded[a:b]
        lane[rows] = _lanes_of_crowded(start[rows], end[rows], fresh[rows])
    return lane, int(lane.max()) + 1


CHAINED_LANES = 8  # lanes given a chain at a time; the rest share one heap walk


def _lanes_of_crowded(start: np.ndarray, end: np.ndarray, fresh: np.ndarray) -> np.ndarray:
    """First-fit lanes of slices in start order, lane by lane (see the module's doc).

    The slices a lane leaves are first-fit among themselves on the later lanes: each
    reaches lane k+1 exactly when lane k was busy, whatever the others hold."""
    lane = np.empty(start.shape[0], dtype=np.int32)
    todo = np.arange(start.shape[0])
    for k in range(CHAINED_LANES):
        if todo.shape[0] == 0:
            return lane
        s = start[todo]
        # A slice's successor on this lane: the first later one starting once it ended.
        after = np.maximum(np.searchsorted(s, end[todo]), np.arange(1, s.shape[0] + 1))
        taken = _walk(after.tolist())
        lane[todo[taken]] = k
        todo = np.delete(todo, taken)
    if todo.shape[0]:
        rest = _first_fit(start[todo].tolist(), end[todo].tolist(), fresh[todo].tolist())
        lane[todo] = np.asarray(rest, dtype=np.int32) + CHAINED_LANES
    return lane


def _walk(after: list[int]) -> list[int]:
    """The chain from the first slice: 0, after[0], after[after[0]], ... (below len)."""
    chain: list[int] = []
    n, i = len(after), 0
    while i < n:
        chain.append(i)
        i = after[i]
    return chain


def _first_fit(
    starts: list[int], ends: list[int], fresh: list[bool], carried: dict[int, int] | None = None
) -> list[int]:
    """First-fit lanes by a heap walk; ``carried`` (lane -> its last end): the cluster an
    earlier chunk left running, whose lanes are 0..k, continued by these slices."""
    # busy: (last end, lane) of lanes still running; free: lanes whose last end <= start.
    # Starts ascend, so a lane once free stays free until it is given a slice, and the
    # smallest free lane is exactly "the first lane whose last end <= start".
    out: list[int] = []
    busy = [(e, k) for k, e in (carried or {}).items()]
    heapq.heapify(busy)
    free: list[int] = []
    opened = max(carried or {}, default=-1) + 1
    for s, e, restart in zip(starts, ends, fresh, strict=True):
        if restart:
            busy.clear()
            free.clear()
            opened = 0
        while busy and busy[0][0] <= s:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            lane = heapq.heappop(free)
        else:
            lane = opened
            opened += 1
        heapq.heappush(busy, (e, lane))
        out.append(lane)
    return out


class CarriedLanes:
    """First-fit lanes given a chunk at a time, per track, exactly as ``assign_lanes``
    gives them to the whole track at once.

    First fit is online: a slice's lane depends only on the slices before it. A slice
    that starts once every earlier one has ended finds every lane free, so each chunk's
    clusters after its first fresh start go to ``assign_lanes`` as they are. What a
    chunk leaves to the next is the cluster still running at its end: its reach and,
    per lane, the end of the lane's last slice (O(lanes), never the cluster's slices);
    the next chunk's slices up to its first fresh start continue it (a heap walk)."""

    def __init__(self) -> None:
        self._reach: dict[int, int] = {}  # per track: the latest end so far
        self._ends: dict[int, dict[int, int]] = {}  # per track: lane -> its last end
        self.lanes: dict[int, int] = {}  # per track: lanes used so far

    def assign(self, track: int, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Lanes (int32) of the track's next slices: ``start`` ascending, none before
        a slice of an earlier call."""
        n = int(start.shape[0])
        lane = np.zeros(n, dtype=np.int32)
        if n == 0:
            return lane
        before = self._reach.get(track)
        reach = np.maximum.accumulate(end)
        if before is not None:
            np.maximum(reach, before, out=reach)
        fresh = np.empty(n, dtype=bool)
        fresh[0] = before is None or int(start[0]) >= before
        np.greater_equal(start[1:], reach[:-1], out=fresh[1:])
        starts = np.flatnonzero(fresh)
        first = int(starts[0]) if starts.shape[0] else n
        if first:  # the slices continuing the cluster the last chunk left running
            carried = self._ends[track]
            lane[:first] = _first_fit(start[:first].tolist(), end[:first].tolist(),
                                      [False] * first, carried)  # fmt: skip
        if first < n:
            lane[first:] = assign_lanes(start[first:], end[first:])[0]
        last = int(starts[-1]) if starts.shape[0] else 0  # the cluster running at the end
        ends = {} if starts.shape[0] else self._ends[track]
        mine, their_ends = lane[last:], end[last:]
        lanes, at = np.unique(mine[::-1], return_index=True)  # each lane's last slice
        for k, i in zip(lanes.tolist(), at.tolist(), strict=True):
            ends[k] = int(their_ends[mine.shape[0] - 1 - i])
        self._ends[track] = ends
        self._reach[track] = int(reach[-1])
        self.lanes[track] = max(self.lanes.get(track, 0), int(lane.max()) + 1)
        return lane
