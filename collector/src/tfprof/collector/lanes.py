"""Lane assignment: split overlapping slices of one track into non-overlapping lanes.

Same rule as tf.timeline's ``_assign_lanes``: walk the slices in start order and put each
one on the first lane whose last slice has ended (end <= start), opening a new lane when
none has. Slices on one CUDA stream rarely overlap, so the common case is answered with
numpy alone; only clusters of mutually overlapping slices go through the Python loop,
a batch of whole clusters at a time (a host thread's nested ranges are nearly all
crowded: millions of them as Python lists at once took hundreds of MB).
"""

from __future__ import annotations

import heapq

import numpy as np

FIRST_FIT_BATCH = 1 << 16  # crowded slices handed to the Python loop at once, about


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
        lane[rows] = _first_fit(start[rows].tolist(), end[rows].tolist(), fresh[rows].tolist())
    return lane, int(lane.max()) + 1


def _first_fit(starts: list[int], ends: list[int], fresh: list[bool]) -> list[int]:
    # busy: (last end, lane) of lanes still running; free: lanes whose last end <= start.
    # Starts ascend, so a lane once free stays free until it is given a slice, and the
    # smallest free lane is exactly "the first lane whose last end <= start".
    out: list[int] = []
    busy: list[tuple[int, int]] = []
    free: list[int] = []
    opened = 0
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
