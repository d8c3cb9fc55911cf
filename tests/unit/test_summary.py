"""collector/analysis/run_summary.py: the short end-of-run summary over hand-made jobs."""

from __future__ import annotations

from typing import Any

import numpy as np

from tfprof.collector.analysis.run_summary import short_summary
from tfprof.collector.jobdata import RECORD_COLUMNS, DeviceMeta, DropCounts, JobData, StreamData
from tfprof.core.records import RecordKind

from .stored_jobs import lake_jobs

K, C, S = RecordKind.KERNEL, RecordKind.MEMCPY, RecordKind.MEMSET


def records(rows: list[tuple[int, int, int, int, int]]) -> dict[str, np.ndarray]:
    """Rows of (kind, duration_ns, name, bytes, device)."""
    cols = {c: np.zeros(len(rows), dtype=np.int64) for c in RECORD_COLUMNS}
    for i, (kind, dur, name, nbytes, device) in enumerate(rows):
        cols["kind"][i] = kind
        cols["start_ns"][i] = 1_000 * i
        cols["duration_ns"][i] = dur
        cols["name"][i] = name
        cols["bytes"][i] = nbytes
        cols["device"][i] = device
    return cols


def stream(pid: int, rows: list[tuple[int, int, int, int, int]], strings: list[str],
           uuid: str = "GPU-a", dropped: DropCounts | None = None) -> StreamData:  # fmt: skip
    return StreamData(job="train", run_id="r1", host="h1", pid=pid, task=str(pid),
                      strings=strings, records=records(rows),
                      devices={0: DeviceMeta(ordinal=0, uuid=uuid)},
                      dropped=dropped or DropCounts())  # fmt: skip


def summary(jobs: list[JobData], **options: Any) -> str:
    """The summary of hand-made ``jobs``, read as stored ones are (lake streams)."""
    return short_summary(lake_jobs(jobs), **options)


def make_job() -> JobData:
    first = stream(1, [
        (K, 3_000_000, 1, 0, 0),    # gemm 3 ms
        (K, 1_000_000, 2, 0, 0),    # relu 1 ms
        (K, 2_000_000, 1, 0, 0),    # gemm 2 ms
        (C, 500_000, 0, 2_000_000, 0),
        (S, 100_000, 0, 64, 0),
    ], ["", "gemm", "relu"], dropped=DropCounts(queue=4, tracer=1))  # fmt: skip
    # Same physical GPU, different string ids for the same names.
    second = stream(2, [
        (K, 4_500_000, 1, 0, 0),    # relu 4.5 ms
        (K, 500_000, 2, 0, 0),      # softmax 0.5 ms
        (C, 250_000, 0, 1_000_000, 0),
    ], ["", "relu", "softmax"], dropped=DropCounts(relay=2))  # fmt: skip
    return JobData(name="train", run_id="r1", streams=[first, second])


def table(lines: list[str], header: str) -> list[list[str]]:
    """The rows (split on runs of 2+ spaces) under the line starting with ``header``."""
    import re

    at = next(i for i, line in enumerate(lines) if line.strip().startswith(header))
    rows = []
    for line in lines[at + 1 :]:
        if not line.startswith("  ") or not line.strip() or line.startswith("  dropped"):
            break
        rows.append(re.split(r"\s{2,}", line.strip()))
    return rows


def test_counts_bytes_and_dropped() -> None:
    lines = summary([make_job()]).splitlines()
    assert lines[0].startswith("tfprof: job train: 2 traced processes, 1 GPU, session ")
    assert "  dropped 7 records before the collector" in lines
    assert "  Activity  Count  Time (ms)  Bytes (MB)" in lines
    assert table(lines, "Activity") == [
        ["kernels", "5", "11.000"],
        ["copies", "2", "0.750", "3.0"],
        ["memsets", "1", "0.100"],
    ]


def test_session_length_and_gpu_busy() -> None:
    first = summary([make_job()]).splitlines()[0]
    # The window runs from 0 to the end of the 4.5 ms relu that starts at 0 in pid 2.
    assert ", session 0.004 s, GPU busy 100.0 %" in first


def test_top_kernels_in_order_of_total_time() -> None:
    lines = summary([make_job()]).splitlines()
    header = next(line.split() for line in lines if "Instances" in line)
    assert " ".join(header) == ("Time (%) Total (ms) Instances Avg (ms) Med (ms) StdDev (ms) Name")
    top = table(lines, "Time (%)")
    # relu (1 + 4.5 ms, two processes) outranks gemm (3 + 2 ms), seen first.
    assert [row[-1] for row in top] == ["relu", "gemm", "softmax"]
    assert [row[2] for row in top] == ["2", "2", "1"]
    assert [row[0] for row in top] == ["50.0", "45.5", "4.5"]
    assert [row[1] for row in top] == ["5.500", "5.000", "0.500"]
    assert [row[3] for row in top] == ["2.750", "2.500", "0.500"]  # mean
    assert [row[4] for row in top] == ["2.750", "2.500", "0.500"]  # median
    assert [row[5] for row in top] == ["2.475", "0.707", "0.000"]  # sample stddev

    limited = summary([make_job()], top=1).splitlines()
    assert [row[-1] for row in table(limited, "Time (%)")] == ["relu"]


def test_time_columns_scale_to_readable_units() -> None:
    job = JobData(name="j", run_id="r", streams=[stream(1, [
        (K, 2_500_000_000, 1, 0, 0),  # 2.5 s
        (K, 1_500, 2, 0, 0),          # 1.5 us
    ], ["", "long", "short"])])  # fmt: skip
    lines = summary([job]).splitlines()
    assert "Time (s)" in next(line for line in lines if "Activity" in line)
    assert table(lines, "Activity")[0] == ["kernels", "2", "2.500"]
    header = next(line for line in lines if "Instances" in line)
    assert "Total (s)" in header
    assert [row[1] for row in table(lines, "Time (%)")] == ["2.500", "0.000"]


def test_gpus_are_counted_by_physical_identity() -> None:
    job = make_job()
    job.streams[1].devices = {0: DeviceMeta(ordinal=0, uuid="GPU-b")}
    assert "2 traced processes, 2 GPUs" in summary([job])


def test_long_kernel_names_are_shortened() -> None:
    name = "void cutlass::Kernel<" + "x" * 100 + ">"
    job = JobData(name="j", run_id="r", streams=[stream(1, [(K, 10, 1, 0, 0)], ["", name])])
    last = summary([job]).splitlines()[-1]
    assert last.endswith(name[:57] + "...")
    assert name not in last


def test_several_jobs_and_none() -> None:
    other = JobData(name="eval", run_id="r2", streams=[stream(9, [], [""])])
    text = summary([make_job(), other])
    assert "tfprof: job train: 2 traced processes" in text
    assert "tfprof: job eval: 1 traced process, 0 GPUs, session 0.000 s\n" in text
    eval_part = text[text.index("tfprof: job eval") :]
    # No GPU record: said plainly, with the analyses' own words, and no empty tables.
    assert "job eval: no GPU activity was recorded" in eval_part
    assert "  dropped 0 records before the collector" in eval_part
    assert "Activity" not in eval_part and "GPU busy" not in eval_part
    assert "1970" not in text
    assert summary([]) == "tfprof: no traced processes\n"


def test_next_commands_name_the_real_paths() -> None:
    text = summary([make_job()], trace="my runs/t.json.gz")
    assert text.endswith(
        "tfprof: next:\n"
        "  tfprof-collector summary 'my runs/t.json.gz'\n"
        "  tfprof-collector advise 'my runs/t.json.gz'\n"
        "  tfprof-collector export 'my runs/t.json.gz' -o 'my runs/t.pftrace'\n"
    )
    assert "next:" not in summary([make_job()])
