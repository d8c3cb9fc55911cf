"""collector/analysis: record window and the five views, on hand-made records with known
answers, read through the read engine as stored jobs are."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest

from tfprof.collector.analysis.filters import Filters
from tfprof.collector.analysis.view_render import CsvReporter, JsonReporter, TableReporter
from tfprof.collector.cli import main
from tfprof.collector.errors import AnalysisError, InvalidArgument
from tfprof.collector.jobdata import DropCounts, JobData
from tfprof.collector.timespec import parse_time

from .analysis_data import T0, US, copy, job, kernel, memset, stream, sync
from .stored_jobs import report_of, rows_of, store_jobs


def _two_process_job() -> JobData:
    first = stream([kernel(0, 30), kernel(10, 30, name=2), kernel(100, 10), copy(40, 20, 2_000_000),
                    memset(200, 5), sync(60, 40)],
                   dropped=DropCounts(queue=3))  # fmt: skip
    second = stream([kernel(0, 50, name=1, stream=9)], pid=2, names=["", "relu"])
    return job("train", first, second)


def test_record_window_shifts_clips_and_names_across_streams(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    j = _two_process_job()
    j.streams[1].record_shift_ns = 1_000 * US
    since, until = T0 + 20 * US, T0 + 1_030 * US
    rep = report_of("kernels", [j], since, until)
    assert rep.start_ns == T0 + 20 * US and rep.end_ns - rep.start_ns == 1_010 * US
    # the kernel [0,30) is clipped to [20,30); the shifted second process sits at 1000,
    # its relu [1000,1050) clipped to [1000,1030): one name across both string tables
    rows = {r.name: r for r in rep.rows}
    assert sorted(rows) == ["gemm", "relu"]
    assert (rows["gemm"].count, rows["gemm"].total_us, rows["gemm"].min_us) == (2, 20.0, 10.0)
    assert (rows["relu"].count, rows["relu"].total_us) == (2, 50.0)  # [20,40) and [1000,1030)
    # Busy [20,60) [100,110) [200,205) [1000,1030): unshifted, the relu would sit at [20,50)
    (gpu,) = rows_of("gpus", [j], since, until)
    assert gpu.busy_us == 85.0
    assert gpu.idle_gaps[0].start_ns == T0 + 205 * US and gpu.idle_gaps[0].duration_us == 795.0
    d = str(store_jobs(tmp_path / "data", [j]))
    assert main(["summary", "--data-dir", d, "--since", "+20us", "--until", "+20us"]) == 2
    assert "the window is empty" in capsys.readouterr().err


def test_kernels_view_counts_totals_and_gpu_share() -> None:
    jobs = [_two_process_job()]
    rows = {r.name: r for r in rows_of("kernels", jobs)}
    assert rows["gemm"].count == 2 and rows["gemm"].total_us == 40.0
    assert (rows["gemm"].min_us, rows["gemm"].max_us, rows["gemm"].avg_us) == (10.0, 30.0, 20.0)
    assert rows["relu"].count == 2 and rows["relu"].total_us == 80.0
    # GPU busy (one GPU, both processes): [0,60) + [100,110) + [200,205) = 75 us
    assert rows["relu"].gpu_busy_pct == round(100 * 80 / 75, 2)
    assert rows["relu"].kernel_time_pct == round(100 * 80 / 120, 2)
    by_job = rows_of("kernels-by-job", jobs)
    assert {r.job for r in by_job} == {"train"}


def test_streams_view_busy_is_the_union_and_syncs_are_not_busy() -> None:
    rows = {(r.pid, r.stream): r for r in rows_of("streams", [_two_process_job()])}
    s7 = rows[(1, 7)]
    assert s7.busy_us == 75.0  # [0,60) + [100,110) + [200,205); the sync adds nothing
    assert (s7.kernels, s7.copies, s7.memsets, s7.syncs, s7.sync_us) == (3, 1, 1, 1, 40.0)
    assert s7.busy_pct == round(100 * 75 / 205, 2)
    assert s7.track == "/job:train/task:1/gpu:0/stream:7"
    assert rows[(2, 9)].busy_us == 50.0


def test_gpus_view_idle_gaps_and_job_shares() -> None:
    a_job = job("a", stream([kernel(0, 10), kernel(50, 10)]))
    b_job = job("b", stream([kernel(5, 10), kernel(90, 10)], pid=2))
    (row,) = rows_of("gpus", [a_job, b_job])
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
    rows = rows_of("gpus", [one, two, three])
    assert sorted((r.uuid, len(r.jobs)) for r in rows) == [("GPU-x", 2), ("GPU-y", 1)]


def test_memcpy_view_bandwidth_and_overlap_with_kernels_on_the_same_gpu() -> None:
    s = stream([kernel(0, 100), copy(50, 100, 1_000_000, src=1),
                copy(300, 10, 500, kind=2, src=3, dst=2), kernel(0, 1000, device=1)])  # fmt: skip
    rows = {r.copy: r for r in rows_of("memcpy", [job("j", s)])}
    htod = rows["HtoD pageable->device"]
    assert htod.gbps == 10.0  # 1e6 bytes in 100 us
    assert htod.overlapped_pct == 50.0  # the kernel on device 1 does not count
    assert rows["DtoH device->pinned"].overlapped_pct == 0.0


def test_jobs_view() -> None:
    (row,) = rows_of("jobs", [_two_process_job()])
    assert (row.processes, row.gpus, row.kernels, row.copies, row.memsets, row.syncs) == (
        2, 1, 4, 1, 1, 1
    )  # fmt: skip
    assert (row.kernel_us, row.copy_us, row.copy_bytes, row.dropped) == (120.0, 20.0, 2_000_000, 3)


def test_filters_order_select_regex_top_and_errors() -> None:
    jobs = [_two_process_job()]
    rep = report_of("kernels", jobs, filters=Filters(order_by="count", select=("name", "count"),
                                                     hide_name_regex="^gemm$", top=5))  # fmt: skip
    assert rep.fields == ("name", "count")
    assert [r.name for r in rep.rows] == ["relu"]
    at_least_50 = report_of("kernels", jobs, filters=Filters(min_micros=50))
    assert [r.name for r in at_least_50.rows] == ["relu"]
    assert "job" not in report_of("kernels", jobs).fields
    for bad, match in (
        (Filters(order_by="nope"), "no field 'nope'"),
        (Filters(select=("name", "zzz")), "no field 'zzz'"),
        (Filters(show_name_regex="("), "invalid regular expression"),
        (Filters(top=-1), "--top"),
    ):
        with pytest.raises(AnalysisError, match=match):
            report_of("kernels", jobs, filters=bad)
    with pytest.raises(AnalysisError, match="unknown view"):
        report_of("ops", jobs)


def test_reporters_table_json_csv() -> None:
    rep = report_of("gpus", [_two_process_job()])
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
    jobs = [_two_process_job()]
    (row,) = [r for r in rows_of("memcpy", jobs, T0 + 50 * US, T0 + 1_000 * US) if r.count]
    assert row.bytes == 1_000_000
    assert row.gbps == 100.0


def test_narrow_ids_past_int8_and_keys_past_int16_stay_exact() -> None:
    """200 jobs, each on its own GPU with its own kernel name: ids past int8, and
    (job, GPU) keys up to 39,999, past int16; every view and rule keys them exactly."""
    from tfprof.collector.advice import advise
    from tfprof.collector.analysis.view_table import read_view_report
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
    cat = catalog_of(jobs)
    rows = {r.name: r for r in read_view_report("kernels-by-job", cat).rows}
    assert len(rows) == n and {(r.job, r.count, r.total_us) for r in rows.values()} == {
        (f"j{i}", 1, 10.0) for i in range(n)
    }
    read, (busy,) = engine.read(cat, [Busy()])  # GPUs x jobs
    gpu_of = {g.uuid: i for i, g in enumerate(read.gpus)}
    want = np.zeros((n, n), dtype=np.int64)
    for j in range(n):
        want[gpu_of[f"GPU-{j}"], j] = 10 * US
    assert busy.tolist() == want.tolist()
    assert not [f for f in advise(cat)[1] if f.rule == "time-slicing"]  # no GPU is shared
