"""collector/advice: each rule on small hand-made record sets with known answers, a
silent case for each, and every rule on the real traces in ../shared/data/traces."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from tests.traces import shared_traces
from tfprof.collector.advice import RULE_NAMES, advise
from tfprof.collector.advice.advice_render import JsonReporter, TextReporter
from tfprof.collector.analysis import AnalysisError, prepare
from tfprof.collector.analysis.tracefile import job_from_trace

from .analysis_data import T0, US, copy, job, kernel, stream, sync


def findings(rule: str, *jobs):  # type: ignore[no-untyped-def]
    return advise(prepare(list(jobs)), [rule])


def test_gpu_idle_blames_the_host_when_nothing_runs() -> None:
    # 2 ms span: kernels 0-200 us and 1800-2000 us; 1.6 ms with nothing at all
    (f,) = findings("gpu-idle", job("j", stream([kernel(0, 200), kernel(1800, 200)])))
    assert f.evidence["idle_us"] == 1600.0 and f.evidence["idle_pct"] == 80.0
    assert f.evidence["explained_by"] == "host"
    assert f.evidence["longest_idle_us"] == 1600.0
    assert f.evidence["longest_idle_at_ns"] == T0 + 200 * US
    assert f.impact_us == 1600.0 and f.jobs == ("j",)
    assert "input pipeline" in f.suggestion


def test_gpu_idle_blames_copies_when_copies_fill_the_gaps() -> None:
    rows = [kernel(0, 200), copy(200, 1000), kernel(1800, 200)]
    (f,) = findings("gpu-idle", job("j", stream(rows)))
    assert f.evidence["copies_only_us"] == 1000.0 and f.evidence["idle_us"] == 600.0
    assert f.evidence["explained_by"] == "copies"


def test_gpu_idle_is_silent_on_a_busy_gpu() -> None:
    assert findings("gpu-idle", job("j", stream([kernel(0, 1000), kernel(1000, 900)]))) == []


def test_copy_overlap_reports_exposed_host_device_copies() -> None:
    # HtoD 0-400 with no kernel, then kernel 400-1000; a DtoH 900-1000 fully overlapped
    rows = [copy(0, 400, 4_000_000), kernel(400, 600), copy(900, 100, 1000, kind=2, src=3, dst=2)]
    (f,) = findings("copy-overlap", job("j", stream(rows)))
    assert f.evidence["copy_us"] == 500.0 and f.evidence["overlapped_us"] == 100.0
    assert f.evidence["exposed_us"] == 400.0 and f.evidence["overlapped_pct"] == 20.0
    assert f.streams == ("/job:j/task:1/gpu:0/stream:7",)
    overlapped = [kernel(0, 1000, stream=1), copy(0, 400, 4_000_000)]
    assert findings("copy-overlap", job("j", stream(overlapped))) == []


def test_pageable_copies() -> None:
    rows = [copy(0, 200, 1_000_000, src=1), copy(300, 100, 1000, kind=2, src=3, dst=1),
            copy(500, 300, 1000, src=2)]  # fmt: skip
    (f,) = findings("pageable-memory", job("j", stream(rows)))
    assert (f.evidence["copies"], f.evidence["HtoD"], f.evidence["DtoH"]) == (2, 1, 1)
    assert f.evidence["copy_us"] == 300.0 and "pinned" in f.suggestion
    assert findings("pageable-memory", job("j", stream([copy(0, 50, 10, src=1)]))) == []


def test_tiny_kernels_launch_bound() -> None:
    tiny = [kernel(10 * i, 3, name=3) for i in range(1200)] + [kernel(20_000, 500)] * 100
    (f,) = findings("tiny-kernels", job("j", stream(tiny)))
    assert f.evidence["tiny_kernels"] == 1200 and f.evidence["kernels"] == 1300
    assert f.evidence["most_frequent"] == [{"name": "tiny", "count": 1200}]
    assert f.impact_us == 1200 * 5.0
    few = [kernel(10 * i, 3, name=3) for i in range(999)]
    assert findings("tiny-kernels", job("j", stream(few))) == []


def test_single_stream() -> None:
    rows = [kernel(i * 100, 50) for i in range(10)] + [copy(2000, 40)]
    (f,) = findings("single-stream", job("j", stream(rows)))
    assert f.evidence["stream"] == 7 and f.evidence["copy_us"] == 40.0
    assert f.streams == ("/job:j/task:1/gpu:0/stream:7",)
    two = [*rows[:-1], copy(2000, 40, stream=8)]
    assert findings("single-stream", job("j", stream(two))) == []


def test_time_slicing_shares_and_switches() -> None:
    a_rows = [kernel(0, 10), kernel(20, 10), kernel(40, 10)]
    b_rows = [kernel(10, 10), kernel(30, 30)]
    (f,) = findings("time-slicing", job("a", stream(a_rows)), job("b", stream(b_rows, pid=2)))
    assert f.evidence["switches"] == 4  # a b a b a
    shares = {s["job"]: s["share_pct"] for s in f.evidence["jobs"]}
    assert shares == {"b": 66.7, "a": 50.0}  # 40 and 30 us of 60 us busy; overlap counts twice
    assert f.jobs == ("b", "a")
    after = [kernel(100, 10), kernel(120, 10)]  # one job after the other: no slicing
    assert findings("time-slicing", job("a", stream(a_rows)), job("b", stream(after, pid=2))) == []


def test_sync_stalls() -> None:
    rows = [kernel(0, 100), sync(100, 400, sync_type=4), sync(600, 100, sync_type=1),
            kernel(700, 300)]  # fmt: skip
    (f,) = findings("sync-stalls", job("j", stream(rows)))
    assert f.evidence["wait_us"] == 500.0 and f.evidence["longest_us"] == 400.0
    assert f.evidence["by_type_us"] == {"EventSynchronize": 100.0, "ContextSynchronize": 400.0}
    assert f.evidence["gpu_busy_during_waits_pct"] == 0.0
    quick = [kernel(0, 10_000), sync(100, 10)]
    assert findings("sync-stalls", job("j", stream(quick))) == []


def test_slow_copies() -> None:
    slow = [copy(0, 2000, 4 << 20)]  # 4 MiB in 2 ms: 2.1 GB/s
    (f,) = findings("slow-copies", job("j", stream(slow)))
    assert f.evidence["gbps"] == round((4 << 20) / 2_000_000, 3)
    assert f.impact_us == round(2000 - (4 << 20) / 12.0 / 1000, 3)
    fast = [copy(0, 500, 4 << 20)]  # 8.4 GB/s
    assert findings("slow-copies", job("j", stream(fast))) == []


def test_findings_are_ranked_by_impact_and_render() -> None:
    rows = [kernel(0, 200), kernel(1800, 200), copy(2000, 2000, 4 << 20, src=1)]
    result = advise(prepare([job("j", stream(rows))]))
    assert [f.impact_us for f in result] == sorted((f.impact_us for f in result), reverse=True)
    assert {f.rule for f in result} >= {"gpu-idle", "pageable-memory", "slow-copies"}
    out = io.StringIO()
    JsonReporter(result).render(out)
    doc = json.loads(out.getvalue())
    assert doc["schema"] == "tfprof.advice/1"
    assert set(doc["findings"][0]) >= {
        "rule", "title", "impact_us", "evidence", "suggestion",
        "start_ns", "end_ns", "start", "end", "jobs", "streams",
    }  # fmt: skip
    out = io.StringIO()
    TextReporter(result, colour=False).render(out)
    assert out.getvalue().startswith("1. [")
    with pytest.raises(AnalysisError, match="unknown rule"):
        advise(prepare([job("j", stream(rows))]), ["nope"])


@pytest.mark.parametrize(
    "path",
    ["kineto-hta/simple_add.json.gz", "kineto-hta/event_sync_multi_stream.json.gz",
     "tf-timeline-ikhlestov/GPU_timeline_03_merged_5_runs.json"],
)  # fmt: skip
def test_every_rule_runs_on_real_traces(path: str) -> None:
    file = shared_traces() / path
    if not file.is_file():
        pytest.skip(f"{file} not found (set TFPROF_SHARED_DATA)")
    rs = prepare([job_from_trace(file)])
    result = advise(rs)
    rules = {f.rule for f in result}
    assert rules <= set(RULE_NAMES)
    # These captures are short steps with long host pauses: the GPU sits idle.
    assert "gpu-idle" in rules
    for f in result:
        assert rs.start_ns <= f.start_ns <= f.end_ns <= rs.end_ns
    if path.endswith("simple_add.json.gz"):
        (pageable,) = [f for f in result if f.rule == "pageable-memory"]
        assert pageable.evidence["copies"] == 16 and pageable.evidence["copy_us"] == 39080.0


def test_sync_rule_sees_the_real_sync_records(monkeypatch: pytest.MonkeyPatch) -> None:
    file = shared_traces() / "kineto-hta" / "event_sync_multi_stream.json.gz"
    if not file.is_file():
        pytest.skip(f"{file} not found")
    rs = prepare([job_from_trace(file)])
    from tfprof.collector.advice import base, sync_stalls

    # 33 us of waits in a 20 ms capture: under the thresholds, so lower them here
    monkeypatch.setattr(sync_stalls, "MIN_WAIT_NS", 0)
    monkeypatch.setattr(sync_stalls, "MIN_SHARE_OF_SPAN", 0.0)
    (f,) = sync_stalls.check(base.Context(rs))
    assert f.evidence["syncs"] == 5 and f.evidence["wait_us"] == 33.0
    assert f.evidence["by_type_us"] == {
        "EventSynchronize": 12.0, "StreamWaitEvent": 2.0, "ContextSynchronize": 19.0
    }  # fmt: skip


def test_time_slicing_counts_only_the_time_two_jobs_run_together() -> None:
    import numpy as np

    from tfprof.collector.advice.time_slicing import _overlaps

    # A runs all along, B and C briefly: only B's and C's time is shared, not [20, 80].
    assert _overlaps(np.array([0, 10, 80]), np.array([100, 20, 90])).tolist() == [
        [10, 20],
        [80, 90],
    ]
    # One after the other: never together, whatever the order of their spans.
    assert _overlaps(np.array([0, 20, 40]), np.array([10, 30, 50])).tolist() == []
    # Touching spans do not overlap.
    assert _overlaps(np.array([0, 10]), np.array([10, 20])).tolist() == []


def test_each_jobs_union_on_each_gpu_with_and_without_shared_gpus() -> None:
    """``Context.job_gpu_merged`` renumbers the GPUs' own unions where no two jobs share
    a GPU (jobs in either order of their GPUs) and merges the records where they do:
    both equal merging every record keyed by job and GPU."""
    from tfprof.collector.advice.base import Context
    from tfprof.collector.analysis.intervals import merge_intervals

    a = stream([kernel(0, 10), copy(5, 20), kernel(40, 10), kernel(100, 1)], uuid="GPU-a")
    b = stream([kernel(3, 10), kernel(30, 5)], pid=2, uuid="GPU-b")
    shared = stream([kernel(8, 10), kernel(60, 5)], pid=3, uuid="GPU-a")
    for jobs in ([job("x", a), job("y", b)], [job("y", b), job("x", a)],
                 [job("x", a, b)], [job("x", a), job("y", b, shared)]):  # fmt: skip
        rs = prepare(jobs)
        ctx = Context(rs)
        got = ctx.job_gpu_merged()
        on = rs.kind <= 3
        n_gpus = len(rs.gpus)
        key = rs.job[on].astype(np.int64) * n_gpus + rs.gpu[on]
        want = merge_intervals(key, rs.start[on], rs.end[on], len(rs.jobs) * n_gpus)
        for f in ("group", "start", "end", "busy"):
            assert getattr(got, f).tolist() == getattr(want, f).tolist(), f
        assert ctx.job_gpu_busy.tolist() == want.busy.reshape(len(rs.jobs), n_gpus).tolist()


def test_context_pieces_are_freed_after_their_last_reader_and_computed_again() -> None:
    """``advise`` drops each cached piece once no rule left to run reads it (``READERS``
    names a rule for every cached piece); a piece asked for again is computed again,
    equal to the first."""
    from functools import cached_property

    from tfprof.collector.advice import RULES, _check
    from tfprof.collector.advice.base import READERS, Context

    cached = {n for n, v in vars(Context).items() if isinstance(v, cached_property)}
    assert set(READERS) == cached
    assert set().union(*READERS.values()) <= set(RULE_NAMES)
    rs = prepare([job("j", stream([kernel(0, 200), copy(100, 50), kernel(1800, 200)]))])
    ctx = Context(rs)
    busy = ctx.gpu_busy
    kernels = ctx.kernels_by_gpu
    ctx.release(["copy-overlap", "sync-stalls"])  # both still read: kept
    assert ctx.gpu_busy is busy and ctx.kernels_by_gpu is kernels
    ctx.release(["sync-stalls"])  # kernels_by_gpu read by no rule left
    assert "kernels_by_gpu" not in vars(ctx) and vars(ctx)["gpu_busy"] is busy
    again = ctx.kernels_by_gpu
    assert again is not kernels
    for f in ("group", "start", "end", "busy"):
        assert getattr(again, f).tolist() == getattr(kernels, f).tolist(), f
    # Through advise's loop: after the last rule nothing is held.
    ctx = Context(rs)
    gpu_rules = [r for r in RULES if r.NAME in {"gpu-idle", "copy-overlap", "sync-stalls"}]
    _check(ctx, gpu_rules)
    assert not set(vars(ctx)) & set(READERS)
