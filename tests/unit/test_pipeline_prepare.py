"""collector/timeline/prepare.py: the one step the merge and the analyses share, by hand."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tfprof.collector.jobdata import HOST_COLUMNS, RECORD_COLUMNS, JobData, StreamData
from tfprof.collector.merged.whole import build_timeline
from tfprof.collector.timeline.prepare import (
    MergeError,
    NameTable,
    TimeWindow,
    check_columns,
    host_samples,
    job_labels,
    task_labels,
)

from .stored_jobs import catalog_of


def stream(
    starts: list[int], durations: list[int], *, task: str = "0", host: str = "h", pid: int = 1,
    shift: int = 0, names: list[int] | None = None, strings: list[str] | None = None,
) -> StreamData:  # fmt: skip
    n = len(starts)
    cols = {c: np.zeros(n, dtype=np.int64) for c in RECORD_COLUMNS}
    cols["kind"][:] = 1
    cols["start_ns"][:] = starts
    cols["duration_ns"][:] = durations
    cols["name"][:] = names if names is not None else [1] * n
    cols["correlation"][:] = np.arange(n)
    return StreamData(
        job="j", run_id="r", host=host, pid=pid, task=task, records=cols,
        strings=strings or ["", "gemm"], record_shift_ns=shift,
    )  # fmt: skip


def test_job_labels_name_or_name_dot_run_and_never_merged() -> None:
    jobs = [JobData("a", "r1"), JobData("b", "r1"), JobData("a", "r2"), JobData("b", "r1")]
    assert job_labels(jobs) == ["a.r1", "b", "a.r2", "b.2"]
    assert job_labels([JobData("solo", "x")]) == ["solo"]


def test_analyses_and_timeline_label_jobs_alike() -> None:
    jobs = [
        JobData("a", "r1", [stream([0], [10])]),
        JobData("a", "r2", [stream([0], [10])]),
        JobData("a", "r2", [stream([0], [10])]),  # the same run twice: a store bug
    ]
    timeline = build_timeline(jobs)
    on_timeline = [j["label"] for j in timeline.metadata["jobs"]]
    assert on_timeline == ["a.r1", "a.r2", "a.r2.2"]
    assert [j.label for j in catalog_of(jobs).jobs] == on_timeline


def test_task_labels_tell_processes_apart() -> None:
    one = JobData("j", "r", [stream([0], [1], task="0"), stream([0], [1], task="1", pid=2)])
    assert task_labels(one) == ["0", "1"]
    forked = JobData("j", "r", [stream([0], [1], pid=100), stream([0], [1], pid=200)])
    assert task_labels(forked) == ["0.100", "0.200"]
    hosts = JobData("j", "r", [stream([0], [1], host="x"), stream([0], [1], host="y")])
    assert task_labels(hosts) == ["0.x.1", "0.y.1"]
    reconnect = JobData("j", "r", [stream([0], [1]), stream([5], [1])])
    assert task_labels(reconnect) == ["0", "0"]
    # the analyses (the read engine's catalog) name a process's task as the timeline does
    assert [p.task for p in catalog_of([forked]).processes] == ["0.100", "0.200"]


def test_malformed_records_are_a_merge_error() -> None:
    missing = stream([0], [1])
    del missing.records["bytes"]
    with pytest.raises(MergeError, match="lack"):
        check_columns(missing)
    ragged = stream([0, 1], [1, 1])
    ragged.records["bytes"] = np.zeros(3, dtype=np.int64)
    with pytest.raises(MergeError, match="ragged"):
        check_columns(ragged)


def test_name_table_shares_ids_across_streams() -> None:
    table = NameTable([""])
    first = table.intern_column(["", "relu", "gemm"], np.array([2, 1, 0, 7, 3, -3]), unnamed=0)
    second = table.intern_column(["", "gemm"], np.array([1, 1]), unnamed=0)
    assert table.names == ("", "relu", "gemm")  # in local id order: reproducible
    assert first.tolist() == [2, 1, 0, 0, 0, 0]  # 0 and out-of-range ids: no name
    assert second.tolist() == [2, 2]
    merge_style = NameTable().intern_column(["", "gemm"], np.array([0, 1]), unnamed=-1)
    assert merge_style.tolist() == [-1, 0]


def test_host_samples_shift_window_and_order() -> None:
    def samples(times: list[int]) -> dict[str, Any]:
        out = {c: np.arange(len(times), dtype=np.int64) for c in HOST_COLUMNS}
        out["time_ns"] = np.asarray(times, dtype=np.int64)
        return out

    a, b = stream([0], [1]), stream([0], [1], pid=2)
    a.host_samples, a.host_shift_ns = samples([0, 10, 20]), 5
    b.host_samples = samples([12, 30])
    merged = host_samples([a, b], TimeWindow(10, 30))
    assert merged["time_ns"].tolist() == [12, 15, 25]
    assert merged["rss_bytes"].tolist() == [0, 1, 2]
