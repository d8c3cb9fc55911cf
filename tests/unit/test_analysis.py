"""collector/analysis: record window, interval helpers and the five views, on hand-made
records with known answers."""

from __future__ import annotations

import io
import json
from typing import Literal

import numpy as np
import pytest

from tfprof.collector.analysis import AnalysisError, Filters, prepare, view_report
from tfprof.collector.analysis.gpus import gpu_rows
from tfprof.collector.analysis.intervals import (
    covered,
    gaps,
    group_keys,
    merge_intervals,
    search_sorted,
)
from tfprof.collector.analysis.job_totals import job_rows
from tfprof.collector.analysis.kernels import kernel_rows
from tfprof.collector.analysis.memcpy import memcpy_rows
from tfprof.collector.analysis.streams import stream_rows
from tfprof.collector.analysis.view_render import CsvReporter, JsonReporter, TableReporter
from tfprof.collector.errors import InvalidArgument
from tfprof.collector.jobdata import DropCounts, JobData
from tfprof.collector.timespec import parse_time

from .analysis_data import T0, US, copy, job, kernel, memset, stream, sync


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


def _two_process_job() -> JobData:
    first = stream([kernel(0, 30), kernel(10, 30, name=2), kernel(100, 10), copy(40, 20, 2_000_000),
                    memset(200, 5), sync(60, 40)],
                   dropped=DropCounts(queue=3))  # fmt: skip
    second = stream([kernel(0, 50, name=1, stream=9)], pid=2, names=["", "relu"])
    return job("train", first, second)


def test_record_window_shifts_clips_and_names_across_streams() -> None:
    j = _two_process_job()
    j.streams[1].record_shift_ns = 1_000 * US
    rs = prepare([j], since_ns=T0 + 20 * US, until_ns=T0 + 1_030 * US)
    assert rs.start_ns == T0 + 20 * US and rs.window_ns == 1_010 * US
    # the kernel [0,30) is clipped to [20,30); the shifted second process sits at 1000
    assert int(rs.start.min()) == T0 + 20 * US
    assert sorted(rs.names) == ["", "gemm", "relu"]
    relu = rs.names.index("relu")
    assert int(np.count_nonzero(rs.name == relu)) == 2  # one per process, one global id
    with pytest.raises(AnalysisError, match="empty"):
        prepare([j], since_ns=5, until_ns=5)


def test_kernels_view_counts_totals_and_gpu_share() -> None:
    rs = prepare([_two_process_job()])
    rows = {r.name: r for r in kernel_rows(rs)}
    assert rows["gemm"].count == 2 and rows["gemm"].total_us == 40.0
    assert (rows["gemm"].min_us, rows["gemm"].max_us, rows["gemm"].avg_us) == (10.0, 30.0, 20.0)
    assert rows["relu"].count == 2 and rows["relu"].total_us == 80.0
    # GPU busy (one GPU, both processes): [0,60) + [100,110) + [200,205) = 75 us
    assert rows["relu"].gpu_busy_pct == round(100 * 80 / 75, 2)
    assert rows["relu"].kernel_time_pct == round(100 * 80 / 120, 2)
    by_job = kernel_rows(rs, per_job=True)
    assert {r.job for r in by_job} == {"train"}


def test_streams_view_busy_is_the_union_and_syncs_are_not_busy() -> None:
    rs = prepare([_two_process_job()])
    rows = {(r.pid, r.stream): r for r in stream_rows(rs)}
    s7 = rows[(1, 7)]
    assert s7.busy_us == 75.0  # [0,60) + [100,110) + [200,205); the sync adds nothing
    assert (s7.kernels, s7.copies, s7.memsets, s7.syncs, s7.sync_us) == (3, 1, 1, 1, 40.0)
    assert s7.busy_pct == round(100 * 75 / 205, 2)
    assert s7.track == "/job:train/task:1/gpu:0/stream:7"
    assert rows[(2, 9)].busy_us == 50.0


def test_gpus_view_idle_gaps_and_job_shares() -> None:
    a_job = job("a", stream([kernel(0, 10), kernel(50, 10)]))
    b_job = job("b", stream([kernel(5, 10), kernel(90, 10)], pid=2))
    (row,) = gpu_rows(prepare([a_job, b_job]))
    assert row.busy_us == 35.0  # [0,15) [50,60) [90,100)
    assert row.idle_pct == 65.0
    assert [g.duration_us for g in row.idle_gaps] == [35.0, 30.0]
    assert row.idle_gaps[0].start_ns == T0 + 15 * US
    assert {s.job: s.share_pct for s in row.jobs} == {
        "a": round(100 * 20 / 35, 2), "b": round(100 * 20 / 35, 2)
    }  # fmt: skip


def test_gpus_are_physical_devices_by_uuid() -> None:
    one = job("a", stream([kernel(0, 10)], uuid="GPU-x"))
    two = job("b", stream([kernel(0, 10)], uuid="GPU-x", pid=2))
    three = job("c", stream([kernel(0, 10)], uuid="GPU-y", pid=3))
    rows = gpu_rows(prepare([one, two, three]))
    assert sorted((r.uuid, len(r.jobs)) for r in rows) == [("GPU-x", 2), ("GPU-y", 1)]


def test_memcpy_view_bandwidth_and_overlap_with_kernels_on_the_same_gpu() -> None:
    s = stream([kernel(0, 100), copy(50, 100, 1_000_000, src=1),
                copy(300, 10, 500, kind=2, src=3, dst=2), kernel(0, 1000, device=1)])  # fmt: skip
    rows = {r.copy: r for r in memcpy_rows(prepare([job("j", s)]))}
    htod = rows["HtoD pageable->device"]
    assert htod.gbps == 10.0  # 1e6 bytes in 100 us
    assert htod.overlapped_pct == 50.0  # the kernel on device 1 does not count
    assert rows["DtoH device->pinned"].overlapped_pct == 0.0


def test_jobs_view() -> None:
    (row,) = job_rows(prepare([_two_process_job()]))
    assert (row.processes, row.gpus, row.kernels, row.copies, row.memsets, row.syncs) == (
        2, 1, 4, 1, 1, 1
    )  # fmt: skip
    assert (row.kernel_us, row.copy_us, row.copy_bytes, row.dropped) == (120.0, 20.0, 2_000_000, 3)


def test_filters_order_select_regex_top_and_errors() -> None:
    rs = prepare([_two_process_job()])
    rep = view_report("kernels", rs, Filters(order_by="count", select=("name", "count"),
                                             hide_name_regex="^gemm$", top=5))  # fmt: skip
    assert rep.fields == ("name", "count")
    assert [r.name for r in rep.rows] == ["relu"]
    assert [r.name for r in view_report("kernels", rs, Filters(min_micros=50)).rows] == ["relu"]
    assert "job" not in view_report("kernels", rs).fields
    for bad, match in (
        (Filters(order_by="nope"), "no field 'nope'"),
        (Filters(select=("name", "zzz")), "no field 'zzz'"),
        (Filters(show_name_regex="("), "invalid regular expression"),
        (Filters(top=-1), "--top"),
    ):
        with pytest.raises(AnalysisError, match=match):
            view_report("kernels", rs, bad)
    with pytest.raises(AnalysisError, match="unknown view"):
        view_report("ops", rs)


def test_reporters_table_json_csv() -> None:
    rs = prepare([_two_process_job()])
    rep = view_report("gpus", rs)
    out = io.StringIO()
    JsonReporter(rep).render(out)
    doc = json.loads(out.getvalue())
    assert doc["schema"] == "tfprof.summary/1" and doc["view"] == "gpus"
    assert doc["rows"][0]["jobs"] == [{"job": "train", "busy_us": 75.0, "share_pct": 100.0}]
    assert set(doc["window"]) == {"start_ns", "end_ns", "start", "end", "duration_us"}
    out = io.StringIO()
    CsvReporter(rep).render(out)
    assert out.getvalue().splitlines()[0].startswith("uuid,name,busy_us")
    out = io.StringIO()
    TableReporter(rep, colour=False).render(out)
    assert "\x1b[" not in out.getvalue() and "GPU-a" in out.getvalue()
    out = io.StringIO()
    TableReporter(rep, colour=True).render(out)
    assert "\x1b[1m" in out.getvalue()


def test_table_colour_follows_the_terminal_and_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    from tfprof.collector.analysis.view_render import use_colour

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    assert use_colour(Tty()) and not use_colour(io.StringIO())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not use_colour(Tty())


def test_parse_time_forms() -> None:
    first = T0
    assert parse_time("+5s", first) == T0 + 5 * 10**9
    assert parse_time("+250ms", first) == T0 + 250 * 10**6
    assert parse_time("1700000000.5", None) == 1_700_000_000_500_000_000
    assert parse_time("2023-11-14T22:13:20.5Z", None) == 1_700_000_000_500_000_000
    assert parse_time("250ms", first) == T0 + 250 * 10**6  # a unit makes it an offset
    assert parse_time("0", first) == T0
    assert parse_time("@1700000000.5", None) == 1_700_000_000_500_000_000
    assert parse_time("@1700000000500000000ns", None) == 1_700_000_000_500_000_000
    with pytest.raises(InvalidArgument, match="not a time"):
        parse_time("yesterday", first)
    with pytest.raises(InvalidArgument, match="no records"):
        parse_time("+1s", None)


def test_a_copy_clipped_by_the_window_keeps_its_own_rate() -> None:
    # copy(40, 20, 2_000_000): 2 MB in [40, 60) us = 100 GB/s; half of it in the window.
    rs = prepare([_two_process_job()], since_ns=T0 + 50 * US, until_ns=T0 + 1_000 * US)
    (row,) = [r for r in memcpy_rows(rs) if r.count]
    assert row.bytes == 1_000_000
    assert row.gbps == 100.0


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
    from tfprof.collector.analysis import intervals

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
    from tfprof.collector.analysis import intervals
    from tfprof.collector.analysis.intervals import covered, covers_by_parts

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
    from tfprof.collector.analysis import intervals

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


def test_id_columns_take_the_smallest_type_that_holds_them() -> None:
    from tfprof.collector.analysis.records import _smallest

    for values, dtype in (([0, 127], np.int8), ([-1, 128], np.int16), ([-129, 5], np.int16),
                          ([0, 32768], np.int32), ([0, 2**31], np.int64)):  # fmt: skip
        got = _smallest(np.array(values, dtype=np.int64))
        assert got.dtype == dtype and got.tolist() == values


def test_narrow_ids_past_int8_and_keys_past_int16_stay_exact() -> None:
    """200 jobs, each on its own GPU with its own kernel name: ids past int8, and
    (job, GPU) keys up to 39,999, past int16; every view and rule keys them exactly."""
    from tfprof.collector.advice import advise
    from tfprof.collector.read import engine
    from tfprof.collector.read.gpu_sweeps import JobGpuBusy
    from tfprof.collector.read.needs import Got, Query, Sweep

    from .stored_jobs import catalog_of

    class Busy:
        def queries(self) -> tuple[Query, ...]:
            return ()

        def sweeps(self) -> tuple[Sweep[np.ndarray], ...]:
            return (JobGpuBusy(),)

        def build(self, got: Got) -> np.ndarray:
            return got.swept(JobGpuBusy())

    n = 200
    names = ["", *(f"k{i}" for i in range(n))]
    jobs = [
        job(f"j{i}", stream([kernel(i, 10, name=i + 1)], job=f"j{i}", pid=i + 1,
                            uuid=f"GPU-{i}", names=names))
        for i in range(n)
    ]  # fmt: skip
    rs = prepare(jobs)
    dtypes = [str(c.dtype) for c in (rs.job, rs.gpu, rs.process, rs.name, rs.device)]
    assert dtypes == ["int16", "int16", "int16", "int16", "int8"]
    rows = {r.name: r for r in kernel_rows(rs, per_job=True)}
    assert len(rows) == n and {(r.job, r.count, r.total_us) for r in rows.values()} == {
        (f"j{i}", 1, 10.0) for i in range(n)
    }
    cat = catalog_of(jobs)
    read, (busy,) = engine.read(cat, [Busy()])  # GPUs x jobs
    gpu_of = {g.uuid: i for i, g in enumerate(read.gpus)}
    want = np.zeros((n, n), dtype=np.int64)
    for j in range(n):
        want[gpu_of[f"GPU-{j}"], j] = 10 * US
    assert busy.tolist() == want.tolist()
    assert not [f for f in advise(cat)[1] if f.rule == "time-slicing"]  # no GPU is shared
