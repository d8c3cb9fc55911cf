"""collector/advice: each rule on small hand-made record sets with known answers, a
silent case for each, and every rule on the real traces in ../shared/data/traces."""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from tests.traces import shared_traces
from tfprof.collector.advice import RULE_NAMES, advise
from tfprof.collector.advice.advice_render import JsonReporter, TextReporter
from tfprof.collector.advice.base import Finding
from tfprof.collector.errors import AnalysisError
from tfprof.collector.jobdata import JobData
from tfprof.collector.read import engine
from tfprof.collector.read.gpu_spans import GpuSpans, overlapping_time
from tfprof.collector.read.needs import Got, Query, Sweep
from tfprof.collector.read.trace_job import job_from_trace

from .analysis_data import T0, US, copy, job, kernel, stream, sync
from .stored_jobs import catalog_of


def findings(rule: str, *jobs: JobData) -> list[Finding]:
    return advise(catalog_of(list(jobs)), [rule])[1]


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
    _, result = advise(catalog_of([job("j", stream(rows))]))
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
        advise(catalog_of([job("j", stream(rows))]), ["nope"])


@pytest.mark.parametrize(
    "path",
    ["kineto-hta/simple_add.json.gz", "kineto-hta/event_sync_multi_stream.json.gz",
     "tf-timeline-ikhlestov/GPU_timeline_03_merged_5_runs.json"],
)  # fmt: skip
def test_every_rule_runs_on_real_traces(path: str) -> None:
    file = shared_traces() / path
    if not file.is_file():
        pytest.skip(f"{file} not found (set TFPROF_SHARED_DATA)")
    read, result = advise(catalog_of([job_from_trace(file)]))
    rules = {f.rule for f in result}
    assert rules <= set(RULE_NAMES)
    # These captures are short steps with long host pauses: the GPU sits idle.
    assert "gpu-idle" in rules
    for f in result:
        assert read.start_ns <= f.start_ns <= f.end_ns <= read.end_ns
    if path.endswith("simple_add.json.gz"):
        (pageable,) = [f for f in result if f.rule == "pageable-memory"]
        assert pageable.evidence["copies"] == 16 and pageable.evidence["copy_us"] == 39080.0


def test_sync_rule_sees_the_real_sync_records(monkeypatch: pytest.MonkeyPatch) -> None:
    file = shared_traces() / "kineto-hta" / "event_sync_multi_stream.json.gz"
    if not file.is_file():
        pytest.skip(f"{file} not found")
    from tfprof.collector.advice import sync_stalls

    # 33 us of waits in a 20 ms capture: under the thresholds, so lower them here
    monkeypatch.setattr(sync_stalls, "MIN_WAIT_NS", 0)
    monkeypatch.setattr(sync_stalls, "MIN_SHARE_OF_SPAN", 0.0)
    (f,) = advise(catalog_of([job_from_trace(file)]), ["sync-stalls"])[1]
    assert f.evidence["syncs"] == 5 and f.evidence["wait_us"] == 33.0
    assert f.evidence["by_type_us"] == {
        "EventSynchronize": 12.0, "StreamWaitEvent": 2.0, "ContextSynchronize": 19.0
    }  # fmt: skip


def test_time_slicing_counts_only_the_time_two_jobs_run_together() -> None:
    # A runs all along, B and C briefly: only B's and C's time is shared, not [20, 80].
    assert overlapping_time(np.array([0, 10, 80]), np.array([100, 20, 90])).tolist() == [
        [10, 20],
        [80, 90],
    ]
    # One after the other: never together, whatever the order of their spans.
    assert overlapping_time(np.array([0, 20, 40]), np.array([10, 30, 50])).tolist() == []
    # Touching spans do not overlap.
    assert overlapping_time(np.array([0, 10]), np.array([10, 20])).tolist() == []


@dataclass(frozen=True)
class _Spans:
    def queries(self) -> Sequence[Query]:
        return ()

    def sweeps(self) -> Sequence[Sweep[Any]]:
        return (GpuSpans(),)

    def build(self, got: Got) -> Any:
        return got.swept(GpuSpans())


def test_each_jobs_union_on_each_gpu_with_and_without_shared_gpus() -> None:
    """``GpuSpans`` (gpu-idle, host-stalls, time-slicing): per job's span on a GPU the
    GPU's busy time in it, and per GPU that jobs share each job's own union there, with
    jobs in either order of their GPUs, both equal to merging the records whole."""
    from tests.unit.whole_intervals import merge_intervals

    a = stream([kernel(0, 10), copy(5, 20), kernel(40, 10), kernel(100, 1)], uuid="GPU-a")
    b = stream([kernel(3, 10), kernel(30, 5)], pid=2, uuid="GPU-b")
    shared = stream([kernel(8, 10), kernel(60, 5)], pid=3, uuid="GPU-a")
    for jobs in ([job("x", a), job("y", b)], [job("y", b), job("x", a)],
                 [job("x", a, b)], [job("x", a), job("y", b, shared)]):  # fmt: skip
        read, (got,) = engine.read(catalog_of(jobs), [_Spans()])
        uuid = [g.uuid for g in read.gpus]
        rows = [  # (job, GPU, start, end) of every record, from the jobs as made
            (j, uuid.index(st.devices[0].uuid), s0, s0 + d)
            for j, jd in enumerate(jobs) for st in jd.streams
            for s0, d in zip(st.records["start_ns"].tolist(),
                             st.records["duration_ns"].tolist(), strict=True)
        ]  # fmt: skip
        job_of, gpu, start, end = (np.array(c, dtype=np.int64) for c in zip(*rows, strict=True))
        n = len(uuid)
        per_job = merge_intervals(job_of * n + gpu, start, end, len(jobs) * n)
        per_gpu = merge_intervals(gpu, start, end, n)
        for (j, g), span in got.spans.items():
            mine = (job_of == j) & (gpu == g)
            assert (span.lo, span.hi) == (int(start[mine].min()), int(end[mine].max()))
            on = per_gpu.group == g
            s = np.clip(per_gpu.start[on], span.lo, span.hi)
            e = np.clip(per_gpu.end[on], span.lo, span.hi)
            assert span.busy == int((e - s).sum())
        for g, sh in got.shared.items():
            for j in sh.jobs:
                assert sh.job_busy[j] == int(per_job.busy[j * n + g])
        assert bool(got.shared) == (len(jobs) == 2 and len(jobs[1].streams) == 2)


def test_a_sweep_two_rules_ask_runs_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """gpu-idle, host-stalls and time-slicing all ask ``GpuSpans``: one read computes
    it once for the three (what ``Context``'s shared cache did before)."""
    from tfprof.collector.read import gpu_spans

    started: list[int] = []
    original = gpu_spans.GpuSpans.start

    def counted(self: GpuSpans, read: engine.Read) -> Any:
        started.append(1)
        return original(self, read)

    monkeypatch.setattr(gpu_spans.GpuSpans, "start", counted)
    rows = [kernel(0, 200), copy(100, 50), kernel(1800, 200)]
    cat = catalog_of([job("j", stream(rows))])
    _, found = advise(cat, ["gpu-idle", "host-stalls", "time-slicing"])
    assert [f.rule for f in found] == ["gpu-idle"]
    assert started == [1]
