"""Interval arithmetic over records grouped by an integer key (a GPU, a stream, a job on
a GPU): the union of intervals ("busy"), the part of other intervals it covers (copies
overlapped by kernels), the gaps between them (idle), and dense group ids.

Every function works on whole numpy columns: groups occupy disjoint ranges of one int64
key (group * span + time), so one sort and one running maximum serve all groups at once.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from tfprof.collector.errors import AnalysisError

# Few groups of many intervals are merged one group at a time (``_merge_by_group``).
BY_GROUP_MAX_GROUPS = 64
BY_GROUP_MIN_ROWS = 1 << 20


@dataclass(frozen=True)
class Merged:
    """Disjoint busy intervals per group, sorted by (group, start)."""

    group: np.ndarray
    start: np.ndarray
    end: np.ndarray
    busy: np.ndarray  # per group: total length (ns), int64
    num_groups: int

    @property
    def length(self) -> np.ndarray:
        length: np.ndarray = self.end - self.start
        return length


def _keys(group: np.ndarray, times: np.ndarray, origin: int, span: int) -> np.ndarray:
    return group.astype(np.int64) * np.int64(span) + (times - np.int64(origin))


def _span(num_groups: int, start: np.ndarray, end: np.ndarray) -> tuple[int, int]:
    origin = int(start.min())
    span = int(end.max()) - origin + 1
    if num_groups * span >= (1 << 62):
        raise AnalysisError(
            f"time span {span} ns over {num_groups} groups is too large to analyse at once; "
            "narrow it with --since/--until"
        )
    return origin, span


def merge_intervals(
    group: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    num_groups: int,
    rows: np.ndarray | None = None,
) -> Merged:
    """The union of ``[start, end)`` per group (of ``rows`` only: ascending indices,
    without copying the columns first). Touching intervals merge."""
    if (start.shape[0] if rows is None else rows.shape[0]) == 0:
        empty = np.zeros(0, dtype=np.int64)
        return Merged(empty, empty, empty, np.zeros(num_groups, dtype=np.int64), num_groups)
    if num_groups == 1:
        return _merge_one(start, end) if rows is None else _merge_one(start[rows], end[rows])
    if (
        num_groups <= BY_GROUP_MAX_GROUPS
        and (start.shape[0] if rows is None else rows.shape[0]) >= BY_GROUP_MIN_ROWS
    ):
        return _merge_by_group(group, start, end, num_groups, rows)
    # Sorted by (group, start), ties in row order, then keyed in place: groups occupy
    # disjoint key ranges, so one running maximum serves all of them. Built in place, as
    # few arrays as possible are alive at once (12M GPU records at 100M stored).
    if rows is None:
        order = np.lexsort((start, group))
    else:
        order = rows[np.lexsort((start[rows], group[rows]))]
    offset = group[order].astype(np.int64)
    ks = start[order].astype(np.int64, copy=False)
    ke = end[order].astype(np.int64, copy=False)
    del order
    origin, span = _span(num_groups, ks, ke)
    offset *= span
    offset -= origin
    ks += offset
    ke += offset
    np.maximum.accumulate(ke, out=ke)  # the reach of every interval so far
    first = np.empty(ks.shape[0], dtype=bool)
    first[0] = True
    np.greater(ks[1:], ke[:-1], out=first[1:])
    heads = np.flatnonzero(first)
    del first
    # Kernels rarely overlap: the union may be nearly as long as its input, so each
    # input array goes as soon as its part of the result is taken.
    m_start = ks[heads]
    del ks
    m_end = ke[np.append(heads[1:] - 1, ke.shape[0] - 1)]
    del ke
    back = offset[heads]
    del offset, heads
    m_start -= back
    m_end -= back
    back += origin
    back //= span  # now each interval's group
    busy = np.bincount(back, weights=m_end - m_start, minlength=num_groups)
    return Merged(back, m_start, m_end, np.rint(busy).astype(np.int64), num_groups)


def _merge_by_group(
    group: np.ndarray, start: np.ndarray, end: np.ndarray, num_groups: int, rows: np.ndarray | None
) -> Merged:
    """``merge_intervals`` one group after the other: a few groups (GPUs) of many
    records, whose joint sort would hold several int64 copies of every record at once."""
    of_rows = group if rows is None else group[rows]
    parts: list[Merged] = []
    busy = np.zeros(num_groups, dtype=np.int64)
    for g in range(num_groups):
        mine = np.flatnonzero(of_rows == g)
        if not mine.shape[0]:
            continue
        if rows is not None:
            mine = rows[mine]
        one = _merge_one(start[mine], end[mine])
        del mine
        parts.append(dataclasses.replace(one, group=np.full(one.start.shape[0], g, np.int64)))
        busy[g] = one.busy[0]
    del of_rows
    group_, start_, end_ = (
        np.concatenate([getattr(m, c) for m in parts]) for c in ("group", "start", "end")
    )
    return Merged(group_, start_, end_, busy, num_groups)


def _merge_one(start: np.ndarray, end: np.ndarray) -> Merged:
    """``merge_intervals`` of a single group: the times are the keys."""
    m_start, m_end = union(start, end)
    m_group = np.zeros(m_start.shape[0], dtype=np.int64)
    busy = np.bincount(m_group, weights=m_end - m_start, minlength=1)
    return Merged(m_group, m_start, m_end, np.rint(busy).astype(np.int64), 1)


def _range_unions(
    parts: Sequence[tuple[np.ndarray, np.ndarray]], chunk_rows: int
) -> Iterator[tuple[int, int, np.ndarray, np.ndarray]]:
    """The union of ``parts`` (each (start, end) of disjoint intervals in start order: a
    union itself) one time range at a time, each range holding about ``chunk_rows`` of
    the parts' intervals: (range start, range end, the union's intervals clipped to the
    range). The ranges cover all of int64, in order."""
    parts = [(s, e) for s, e in parts if s.shape[0]]
    if not parts:
        return
    first = np.array([int(s[0]) for s, _ in parts], dtype=np.int64)
    last = np.array([int(e[-1]) for _, e in parts], dtype=np.int64)  # ends rise too
    for a, b in itertools.pairwise(_time_ranges(parts, chunk_rows)):
        pieces = []
        for i in np.flatnonzero((first < b) & (last > a)).tolist():
            s, e = parts[i]
            lo, hi = np.searchsorted(e, a, side="right"), np.searchsorted(s, b, side="left")
            pieces.append((np.maximum(s[lo:hi], a), np.minimum(e[lo:hi], b)))
        ms, me = union(np.concatenate([p for p, _ in pieces] or [_NONE]),
                       np.concatenate([p for _, p in pieces] or [_NONE]))  # fmt: skip
        del pieces
        yield a, b, ms, me


def covers_by_parts(
    parts: Sequence[tuple[np.ndarray, np.ndarray]],
    groups: Sequence[tuple[np.ndarray, np.ndarray]],
    chunk_rows: int = 1 << 20,
) -> list[np.ndarray]:
    """For each group of intervals (start, end: disjoint, in start order, as one GPU's
    gaps), how much of each the union of ``parts`` covers (ns); each part is (start,
    end) of disjoint intervals in start order (a union itself). The union of the parts
    is never whole in memory: it is made one time range at a time (``_range_unions``),
    once for every group (the gaps of a job's GPUs), and each query end's coverage is
    the union's length before it."""
    befores = [(np.zeros(s.shape[0], dtype=np.int64), np.zeros(s.shape[0], dtype=np.int64))
               for s, _ in groups]  # fmt: skip
    if not any(s.shape[0] for s, _ in groups) or not any(s.shape[0] for s, _ in parts):
        return [e - s for s, e in befores]
    total = 0
    top = int(np.iinfo(np.int64).max)
    for a, b, ms, me in _range_unions(parts, chunk_rows):
        length = np.concatenate(([0], np.cumsum(me - ms)))
        for (start, end), before in zip(groups, befores, strict=True):
            for times, out in zip((start, end), before, strict=True):
                p = np.searchsorted(times, a, side="left")
                # The last range takes the times at its end too.
                q = times.shape[0] if b == top else np.searchsorted(times, b, side="left")
                out[p:q] = total
                if ms.shape[0]:
                    out[p:q] += _until(ms, me, length, times[p:q], in_order=True)
        total += int(length[-1])
    return [e - s for s, e in befores]


_NONE = np.zeros(0, dtype=np.int64)
# ``search_sorted`` merges while the array searched is at most this many times the
# values searched for (500K among 150K: 3.9 ms against 5.0 by binary search).
MERGE_SEARCH_RATIO = 4
_SAMPLE = 1024  # one start in this many places the time ranges of covers_by_parts


def _time_ranges(parts: Sequence[tuple[np.ndarray, np.ndarray]], chunk_rows: int) -> list[int]:
    """Bounds of time ranges that each hold about ``chunk_rows`` of the parts' intervals
    (the first from int64's minimum, the last to its maximum)."""
    sample = np.sort(np.concatenate([s[::_SAMPLE] for s, _ in parts]))
    every = max(chunk_rows // _SAMPLE, 1)
    cuts = np.unique(sample[every::every]).tolist()
    info = np.iinfo(np.int64)
    return [int(info.min), *cuts, int(info.max)]


def search_sorted(
    a: np.ndarray, v: np.ndarray, side: Literal["left", "right"] = "left"
) -> np.ndarray:
    """``np.searchsorted(a, v, side)`` for ``v`` in order too: the two merged by one
    stable sort (which merges sorted runs in linear time) rather than a binary search
    per value (for 262K values among 62K, 2.4 ms against 5.2), unless ``a`` is much the
    longer: then the binary searches cost less, and nothing the size of ``a`` is made
    (a batch's calls among 100M records' gaps)."""
    if a.shape[0] > MERGE_SEARCH_RATIO * v.shape[0]:
        return np.searchsorted(a, v, side)
    if side == "right":  # ties: the values of ``a`` first, counted as before
        order = np.argsort(np.concatenate((a, v)), kind="stable")
        pos = np.flatnonzero(order >= a.shape[0])
    else:
        order = np.argsort(np.concatenate((v, a)), kind="stable")
        pos = np.flatnonzero(order < v.shape[0])
    del order
    pos -= np.arange(v.shape[0], dtype=pos.dtype)
    return pos


def union(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals in any order, as (start, end) int64 of disjoint intervals
    in start order (touching intervals merge)."""
    order = np.argsort(start, kind="stable")  # nearly sorted starts sort fastest stably
    s, e = start[order].astype(np.int64, copy=False), end[order]
    del order
    if not s.shape[0]:
        return s, e.astype(np.int64, copy=False)
    reach = np.maximum.accumulate(e).astype(np.int64, copy=False)
    head = np.empty(s.shape[0], dtype=bool)
    head[0] = True
    np.greater(s[1:], reach[:-1], out=head[1:])
    heads = np.flatnonzero(head)
    return s[heads], reach[np.append(heads[1:] - 1, s.shape[0] - 1)]


def covered(merged: Merged, group: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """For each ``[start, end)`` of ``group``, how much of it ``merged`` covers (ns)."""
    if start.shape[0] == 0 or merged.start.shape[0] == 0:
        return np.zeros(start.shape[0], dtype=np.int64)
    if merged.num_groups <= BY_GROUP_MAX_GROUPS and merged.start.shape[0] >= BY_GROUP_MIN_ROWS:
        return _covered_by_group(merged, group, start, end)
    lo = min(int(merged.start.min()), int(start.min()))
    hi = max(int(merged.end.max()), int(end.max()))
    groups = max(merged.num_groups, int(group.max()) + 1)
    origin, span = _span(groups, np.array([lo]), np.array([hi]))
    ms = _keys(merged.group, merged.start, origin, span)
    me = _keys(merged.group, merged.end, origin, span)
    before = np.concatenate(([0], np.cumsum(me - ms)))

    def coverage_until(t: np.ndarray) -> np.ndarray:
        k = np.searchsorted(ms, t, side="right") - 1
        inside = np.clip(t - ms[np.maximum(k, 0)], 0, (me - ms)[np.maximum(k, 0)])
        return np.where(k >= 0, before[np.maximum(k, 0)] + inside, 0)

    until_end = coverage_until(_keys(group, end, origin, span))
    until_start = coverage_until(_keys(group, start, origin, span))
    result: np.ndarray = until_end - until_start
    return result


def _covered_by_group(
    merged: Merged, group: np.ndarray, start: np.ndarray, end: np.ndarray
) -> np.ndarray:
    """``covered`` one group at a time, on slices of ``merged`` (sorted by group): no
    keyed copy of every busy interval."""
    result = np.zeros(start.shape[0], dtype=np.int64)
    bounds = np.searchsorted(merged.group, np.arange(merged.num_groups + 1))
    for g in np.unique(group).tolist():
        if not 0 <= g < merged.num_groups or bounds[g] == bounds[g + 1]:
            continue  # no busy interval: nothing covered
        a, b = int(bounds[g]), int(bounds[g + 1])
        ms, me = merged.start[a:b], merged.end[a:b]
        before = np.concatenate(([0], np.cumsum(me - ms)))
        mine = np.flatnonzero(group == g)
        result[mine] = _until(ms, me, before, end[mine]) - _until(ms, me, before, start[mine])
    return result


def _until(ms: np.ndarray, me: np.ndarray, before: np.ndarray, t: np.ndarray,
           in_order: bool = False) -> np.ndarray:  # fmt: skip
    """Busy time of one group's intervals (``ms``, ``me``; ``before``: busy time before
    each) up to each time ``t`` (``in_order``: ``t`` ascending)."""
    k = (search_sorted if in_order else np.searchsorted)(ms, t, side="right") - 1
    at = np.maximum(k, 0)
    inside = np.clip(t - ms[at], 0, me[at] - ms[at])
    found: np.ndarray = np.where(k >= 0, before[at] + inside, 0)
    return found


@dataclass(frozen=True)
class Gaps:
    group: np.ndarray
    start: np.ndarray
    end: np.ndarray

    @property
    def length(self) -> np.ndarray:
        length: np.ndarray = self.end - self.start
        return length


def gaps(merged: Merged, lo: np.ndarray, hi: np.ndarray, min_length: int = 1) -> Gaps:
    """Idle gaps per group inside ``[lo[g], hi[g])`` of ``min_length`` ns or more: before
    the first busy interval, between busy intervals, after the last. A group with no
    interval is one gap. Shorter gaps are never made (at 100M records most are)."""
    g, s, e = merged.group, merged.start, merged.end
    n = merged.num_groups
    same = g[1:] == g[:-1]
    inner = np.flatnonzero(same & (s[1:] - e[:-1] >= min_length))
    parts_g = [g[inner]]
    parts_s = [e[inner]]
    parts_e = [s[inner + 1]]
    if g.shape[0]:
        heads = np.flatnonzero(np.concatenate(([True], ~same)))
        tails = np.flatnonzero(np.concatenate((~same, [True])))
        parts_g += [g[heads], g[tails]]
        parts_s += [lo[g[heads]], e[tails]]
        parts_e += [s[heads], hi[g[tails]]]
    used = np.zeros(n, dtype=bool)
    used[g] = True
    idle = np.flatnonzero(~used)
    parts_g.append(idle)
    parts_s.append(lo[idle])
    parts_e.append(hi[idle])
    gg, gs, ge = (np.concatenate(p).astype(np.int64) for p in (parts_g, parts_s, parts_e))
    keep = ge - gs >= max(min_length, 1)
    return Gaps(gg[keep], gs[keep], ge[keep])


def group_keys(*columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dense group ids for combinations of non-negative integer columns, and the
    distinct combinations (one row per group, columns side by side), in key order."""
    n = columns[0].shape[0]
    if not n:
        return np.zeros(0, dtype=np.int64), np.zeros((0, len(columns)), dtype=np.int64)
    lows = [int(c.min()) for c in columns]
    radices = [int(c.max()) - low + 1 for c, low in zip(columns, lows, strict=True)]
    if min(lows) < 0 or float(np.prod(np.array(radices, dtype=np.float64))) >= 2.0**62:
        stacked = np.stack([c.astype(np.int64) for c in columns], axis=1)
        distinct, inverse = np.unique(stacked, axis=0, return_inverse=True)
        return inverse.reshape(-1), distinct
    key = np.zeros(n, dtype=np.int64)
    for c, low, radix in zip(columns, lows, radices, strict=True):
        key *= radix
        key += c.astype(np.int64) - low
    total = int(np.prod(np.array(radices, dtype=np.int64)))
    if total <= 1 << 24:  # few combinations: a table, no sort
        used = np.bincount(key, minlength=total) > 0
        dense = np.cumsum(used) - 1
        distinct_keys = np.flatnonzero(used)
        inverse = dense[key]
    else:
        distinct_keys, inverse = np.unique(key, return_inverse=True)
    rows = np.zeros((distinct_keys.shape[0], len(columns)), dtype=np.int64)
    rest = distinct_keys.copy()
    for i in range(len(columns) - 1, -1, -1):
        rows[:, i] = rest % radices[i] + lows[i]
        rest //= radices[i]
    return inverse.astype(np.int64, copy=False), rows
