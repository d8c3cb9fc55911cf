"""``summary`` and ``advise`` on our own trace files, through the real CLI and real files:
the identity the file carries is kept, and a run without GPU activity still summarises."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tfprof.collector.cli import main
from tfprof.collector.export import write_timeline
from tfprof.collector.jobdata import RECORD_COLUMNS, DeviceMeta, DropCounts, JobData, StreamData
from tfprof.collector.merged.whole import build_timeline
from tfprof.core.records import RecordKind

T0 = 1_700_000_000_000_000_000


def host_samples(n: int, cpu: float, rss: int) -> dict[str, np.ndarray]:
    times = T0 + np.arange(n, dtype=np.int64) * 500_000_000  # every 0.5 s
    return {
        "time_ns": times,
        "cpu_percent": np.full(n, cpu),
        "rss_bytes": np.full(n, rss, dtype=np.int64),
        "threads": np.full(n, 4, dtype=np.int64),
        "read_bytes": np.zeros(n, dtype=np.int64),
        "write_bytes": np.zeros(n, dtype=np.int64),
    }


def kernels(durations: list[int]) -> dict[str, np.ndarray]:
    cols = {c: np.zeros(len(durations), dtype=np.int64) for c in RECORD_COLUMNS}
    cols["kind"][:] = RecordKind.KERNEL
    cols["start_ns"][:] = T0 + np.arange(len(durations)) * 10_000_000
    cols["duration_ns"][:] = durations
    cols["name"][:] = 1
    return cols


def export(tmp_path: Path, stream: StreamData) -> str:
    path = str(tmp_path / "trace.json")
    write_timeline(build_timeline([JobData(stream.job, stream.run_id, [stream])]), path)
    return path


def summary_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    assert main(["summary", *argv, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    return doc


def test_summary_of_our_export_keeps_job_task_and_gpu_identity(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stream = StreamData(
        job="resnet", run_id="run7", host="node-a", pid=4242, task="3", source="cupti",
        devices={0: DeviceMeta(ordinal=0, uuid="GPU-1234", name="H100")},
        strings=["", "gemm"], records=kernels([1_000_000, 3_000_000, 2_000_000]),
        dropped=DropCounts(queue=5), finished=True, exit_code=0,
    )  # fmt: skip
    path = export(tmp_path, stream)
    jobs = summary_json(capsys, path, "--view", "jobs")
    assert jobs["jobs"] == ["resnet"]
    (row,) = jobs["rows"]
    assert (row["job"], row["run_id"], row["dropped"]) == ("resnet", "run7", 5)
    streams = summary_json(capsys, path, "--view", "streams")
    (srow,) = streams["rows"]
    assert srow["track"].startswith("/job:resnet/task:3/")
    gpus = summary_json(capsys, path, "--view", "gpus")
    assert [g["uuid"] for g in gpus["rows"]] == ["GPU-1234"]
    kernels_doc = summary_json(capsys, path)
    (krow,) = kernels_doc["rows"]
    assert (krow["median_us"], krow["stddev_us"]) == (2000.0, 1000.0)


def no_gpu_stream() -> StreamData:
    return StreamData(
        job="mnist", run_id="run1", host="laptop", pid=99, task="99", source="none",
        host_samples=host_samples(9, cpu=80.0, rss=512 * 2**20), finished=True, exit_code=0,
    )  # fmt: skip


def test_a_run_without_gpu_activity_summarises_its_host_samples(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = export(tmp_path, no_gpu_stream())
    doc = summary_json(capsys, path, "--view", "jobs")
    (row,) = doc["rows"]
    assert (row["job"], row["source"], row["processes"]) == ("mnist", "none", 1)
    assert (row["host_seconds"], row["cpu_percent_mean"]) == (4.0, 80.0)
    assert row["rss_max_bytes"] == 512 * 2**20
    assert doc["window"]["start_ns"] == T0
    (note,) = doc["notes"]
    assert "no GPU activity was recorded" in note and "source none" in note

    assert main(["summary", path]) == 0
    text = capsys.readouterr().out
    assert "1970" not in text and "2023-11-14" in text
    assert "no GPU activity was recorded" in text and "CPU 80.0 % mean" in text
    assert "RSS 512.0 MiB peak" in text

    assert main(["advise", path]) == 0
    text = capsys.readouterr().out
    assert "no GPU activity was recorded" in text and "no findings" in text


def test_summary_columns_are_scaled_and_headed_with_their_unit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stream = StreamData(
        job="j", run_id="r", host="h", pid=1, task="0", source="cupti", strings=["", "gemm"],
        devices={0: DeviceMeta(ordinal=0, uuid="GPU-1")},
        records=kernels([1_000_000, 3_000_000, 2_000_000]),
    )  # fmt: skip
    assert main(["summary", export(tmp_path, stream)]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = lines[1].split("  ")
    header = [h.strip() for h in header if h.strip()]
    assert header[:8] == [
        "NAME", "COUNT", "TOTAL (ms)", "AVG (ms)", "MEDIAN (ms)", "MIN (ms)", "MAX (ms)",
        "STDDEV (ms)",
    ]  # fmt: skip
    assert lines[2].split()[:8] == ["gemm", "3", "6.00", "2.00", "2.00", "1.00", "3.00", "1.00"]


def test_advise_shows_offsets_from_the_window_start_and_json_keeps_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = kernels([1_000_000] * 4)
    records["start_ns"][2:] += 3_000_000_000  # a 3 s idle gap: gpu-idle reports when
    stream = StreamData(
        job="j", run_id="r", host="h", pid=1, task="0", source="cupti", strings=["", "gemm"],
        devices={0: DeviceMeta(ordinal=0, uuid="GPU-1")}, records=records,
    )  # fmt: skip
    path = export(tmp_path, stream)
    assert main(["advise", path, "--rule", "gpu-idle"]) == 0
    text = capsys.readouterr().out
    assert "[gpu-idle]" in text
    assert "longest_idle_at=+" in text and str(T0)[:10] not in text
    assert main(["advise", path, "--rule", "gpu-idle", "--format", "json"]) == 0
    (finding,) = json.loads(capsys.readouterr().out)["findings"]
    evidence = finding["evidence"]
    assert evidence["longest_idle_at_ns"] > T0  # the absolute value stays
    assert evidence["longest_idle_at_offset_s"] == pytest.approx(
        (evidence["longest_idle_at_ns"] - T0) / 1e9
    )
    assert finding["start_offset_s"] == 0.0


def test_a_long_kernel_name_is_shortened_in_the_table_only() -> None:
    from tfprof.collector.analysis.view_render import MAX_TEXT_CELL, cell

    name = "void at::native::kernel<" + "x" * 3000 + ">"
    short = cell("name", name)
    assert len(short) == MAX_TEXT_CELL and short.endswith("...") and name.startswith(short[:-3])
    assert cell("name", "gemm") == "gemm"
