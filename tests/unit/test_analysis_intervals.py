"""tests/unit/whole_intervals.py (the whole-column interval rules the read engine's
carried sweeps are checked against): unions, coverage, gaps and group keys, on hand-made
intervals and against the slower ways that must give the same answers."""

from __future__ import annotations

from typing import Literal

import numpy as np
import pytest

from tests.unit.whole_intervals import (
    covered,
    gaps,
    group_keys,
    merge_intervals,
    search_sorted,
)


def a(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def test_merge_intervals_unions_per_group_and_touching_intervals_merge() -> None:
    m = merge_intervals(a(0, 0, 0, 1, 1), a(0, 5, 10, 0, 3), a(6, 8, 12, 2, 4), 3)
    assert list(m.busy) == [10, 3, 0]  # [0,8) + [10,12); [0,2) + [3,4); nothing
    assert list(zip(m.group, m.start, m.end, strict=True)) == [
        (0, 0, 8), (0, 10, 12), (1, 0, 2), (1, 3, 4)
    ]  # fmt: skip
    touching = merge_intervals(a(0, 0), a(0, 5), a(5, 9), 1)
    assert list(touching.start) == [0] and list(touching.end) == [9]


def test_covered_counts_only_the_same_group() -> None:
    m = merge_intervals(a(0, 1), a(10, 0), a(20, 100), 2)
    got = covered(m, a(0, 0, 1), a(5, 15, 50), a(15, 30, 60))
    assert list(got) == [5, 5, 10]


@pytest.mark.parametrize("side", ["left", "right"])
def test_search_sorted_finds_what_a_binary_search_finds(side: Literal["left", "right"]) -> None:
    """Both in order, ties between them and within each, either side, empty inputs."""
    rng = np.random.default_rng(3)
    # Merged (the values as many, or the array up to 4 times longer) or searched.
    for na, nv in ((0, 5), (5, 0), (1, 1), (200, 1000), (700, 200), (1000, 200)):
        a_ = np.sort(rng.integers(0, 300, na))
        v = np.sort(rng.integers(-10, 310, nv))
        got = search_sorted(a_, v, side)
        assert got.tolist() == np.searchsorted(a_, v, side).tolist(), (na, nv)


def test_gaps_include_edges_and_empty_groups() -> None:
    m = merge_intervals(a(0, 0), a(10, 30), a(20, 40), 2)
    g = gaps(m, a(0, 0), a(50, 50))
    assert sorted(zip(g.group.tolist(), g.start.tolist(), g.end.tolist(), strict=True)) == [
        (0, 0, 10), (0, 20, 30), (0, 40, 50), (1, 0, 50)
    ]  # fmt: skip


def test_group_keys_dense_ids_and_distinct_rows() -> None:
    inverse, keys = group_keys(a(1, 0, 1, 1), a(7, 7, 9, 7))
    assert keys.tolist() == [[0, 7], [1, 7], [1, 9]]
    assert inverse.tolist() == [1, 0, 2, 1]


def test_one_group_merges_as_the_keyed_path() -> None:
    """``merge_intervals`` of one group (its own path: the times are the keys) equals
    that group merged beside another one through the keyed path."""
    rng = np.random.default_rng(11)
    for n in (1, 2, 7, 5_000):
        start = rng.integers(10**18, 10**18 + 10**7, n)
        end = start + rng.integers(0, 10**4, n)
        one = merge_intervals(np.zeros(n, dtype=np.int64), start, end, 1)
        two = merge_intervals(
            np.append(np.zeros(n, dtype=np.int64), 1), np.append(start, 0), np.append(end, 1), 2
        )
        mine = two.group == 0
        assert one.start.tolist() == two.start[mine].tolist()
        assert one.end.tolist() == two.end[mine].tolist()
        assert one.busy.tolist() == two.busy[:1].tolist() and one.num_groups == 1


def test_merging_some_rows_equals_merging_their_copies() -> None:
    rng = np.random.default_rng(5)
    n = 2_000
    group = rng.integers(0, 3, n).astype(np.int32)
    start = rng.integers(0, 10**6, n)
    end = start + rng.integers(0, 5_000, n)
    rows = np.flatnonzero(rng.random(n) < 0.6)
    for groups in (1, 3):
        g = group if groups == 3 else np.zeros(n, dtype=np.int32)
        some = merge_intervals(g, start, end, groups, rows=rows)
        copies = merge_intervals(g[rows], start[rows], end[rows], groups)
        for f in ("group", "start", "end", "busy"):
            assert getattr(some, f).tolist() == getattr(copies, f).tolist(), (groups, f)


def test_merging_group_by_group_equals_the_joint_sort(monkeypatch: pytest.MonkeyPatch) -> None:
    """Few groups of many intervals are merged one group at a time: the same union, busy
    time and order as one sort over all of them, with and without ``rows``; a group
    without intervals stays empty."""
    from tests.unit import whole_intervals as intervals

    rng = np.random.default_rng(17)
    n, groups = 20_000, 5
    group = rng.choice([0, 1, 3, 4], n).astype(np.int32)
    start = rng.integers(10**18, 10**18 + 10**8, n)
    end = start + rng.integers(0, 10**5, n)
    rows = np.flatnonzero(rng.random(n) < 0.7)
    joint = [
        merge_intervals(group, start, end, groups),
        merge_intervals(group, start, end, groups, rows),
    ]
    monkeypatch.setattr(intervals, "BY_GROUP_MIN_ROWS", 1)
    by_group = [
        merge_intervals(group, start, end, groups),
        merge_intervals(group, start, end, groups, rows),
    ]
    for a_, b_ in zip(joint, by_group, strict=True):
        assert a_.busy[2] == 0 and a_.busy.sum() > 0
        for f in ("group", "start", "end", "busy"):
            assert getattr(a_, f).tolist() == getattr(b_, f).tolist(), f
        assert a_.num_groups == b_.num_groups


@pytest.mark.parametrize("sample", [1, 7, 1024])
def test_coverage_by_parts_equals_coverage_by_their_whole_union(
    sample: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The union of several unions covers each interval as their union made at once does,
    whatever the time ranges it is made in (down to one per interval): equal starts,
    touching and nested intervals, queries (disjoint, in order) before, across and after
    every part, several groups of them in one pass, empty parts."""
    from tests.unit import whole_intervals as intervals
    from tests.unit.whole_intervals import covered, covers_by_parts

    monkeypatch.setattr(intervals, "_SAMPLE", sample)

    rng = np.random.default_rng(23)
    for sizes, chunk in (((0, 5), 4), ((1, 1), 1), ((300, 2_000, 0, 700), 64),
                         ((3_000, 2_000), 1 << 20), ((5_000,), 1)):  # fmt: skip
        parts, raw_s, raw_e = [], [], []
        for k in sizes:
            start = rng.integers(0, 10_000, k) * 10  # coarse: equal and touching times
            end = start + rng.integers(0, 6, k) * 10
            one = merge_intervals(np.zeros(k, dtype=np.int64), start, end, 1)
            parts.append((one.start, one.end))
            raw_s.append(start)
            raw_e.append(end)
        n = sum(sizes)
        whole = merge_intervals(np.zeros(n, dtype=np.int64), np.concatenate(raw_s),
                                np.concatenate(raw_e), 1)  # fmt: skip
        # Queries as one group's gaps: disjoint, in order, touching some of the time.
        cuts = np.unique(rng.integers(-1_000, 101_000, 801) // 7 * 7)
        q_start, q_end = cuts[0:-1:2], cuts[1::2]
        (got,) = covers_by_parts(parts, [(q_start, q_end)], chunk_rows=chunk)
        want = covered(whole, np.zeros(q_start.shape[0], dtype=np.int64), q_start, q_end)
        assert got.tolist() == want.tolist(), (sizes, chunk)
        # Several GPUs' gaps in one pass over the union: each group as if alone.
        other = np.unique(rng.integers(-1_000, 101_000, 301) // 3 * 3)
        groups = [(q_start, q_end), (other[0:-1:2], other[1::2]), (q_end[:0], q_end[:0])]
        for (gs, ge), got in zip(groups, covers_by_parts(parts, groups, chunk), strict=True):
            want = covered(whole, np.zeros(gs.shape[0], dtype=np.int64), gs, ge)
            assert got.tolist() == want.tolist(), (sizes, chunk)


def test_a_jobs_calls_kept_as_islands_cover_gaps_as_all_of_them() -> None:
    """host-stalls keeps a job's calls (any process, overlapping) as the islands of their
    union, fed in start order a chunk at a time, dropping those no gap to come reaches
    (``stall_gaps._Calls``): each gap is covered as by every call merged whole."""
    from tfprof.collector.read.stall_gaps import _Calls

    rng = np.random.default_rng(29)
    start = np.sort(rng.integers(0, 2_000, 400) * 10)
    end = start + rng.integers(0, 60, 400)
    whole = merge_intervals(np.zeros(400, dtype=np.int64), start, end, 1)
    calls = _Calls()
    for lo in range(0, 400, 37):  # chunks of 37 calls, in start order
        calls.add(start[lo : lo + 37], end[lo : lo + 37])
        if lo + 37 >= 400:
            break
        bound = int(start[lo + 37])  # gaps to come start at or after it
        held = calls.start.shape[0]
        calls.forget(bound)
        assert calls.start.shape[0] <= held
        cuts = np.unique(rng.integers(bound, 20_100, 41))
        a, b = cuts[0:-1:2], cuts[1::2]
        fed = slice(0, lo + 37)
        so_far = merge_intervals(np.zeros(lo + 37, dtype=np.int64), start[fed], end[fed], 1)
        want = covered(so_far, np.zeros(a.shape[0], dtype=np.int64), a, b)
        assert calls.cover(a, b).tolist() == want.tolist()
    cuts = np.unique(rng.integers(-100, 20_100, 301))
    a, b = cuts[0:-1:2], cuts[1::2]
    keep = _Calls()
    keep.add(start, end)
    want = covered(whole, np.zeros(a.shape[0], dtype=np.int64), a, b)
    assert want.sum() > 0 and keep.cover(a, b).tolist() == want.tolist()


def test_coverage_group_by_group_equals_the_keyed_search(monkeypatch: pytest.MonkeyPatch) -> None:
    """``covered`` one group at a time (few groups of many busy intervals) gives the
    keyed search's answer, also for groups without intervals and past the last one."""
    from tests.unit import whole_intervals as intervals

    rng = np.random.default_rng(29)
    n = 5_000
    group = rng.choice([0, 1, 3], n)
    start = rng.integers(10**18, 10**18 + 10**7, n)
    merged = merge_intervals(group, start, start + rng.integers(0, 10**4, n), 4)
    q_group = rng.integers(0, 6, 3_000)  # 2 has no interval; 4 and 5 are past the last
    q_start = rng.integers(10**18 - 10**5, 10**18 + 10**7 + 10**5, 3_000)
    q_end = q_start + rng.integers(0, 10**5, 3_000)
    keyed = covered(merged, q_group, q_start, q_end)
    monkeypatch.setattr(intervals, "BY_GROUP_MIN_ROWS", 1)
    by_group = covered(merged, q_group, q_start, q_end)
    assert by_group.tolist() == keyed.tolist() and keyed.sum() > 0
