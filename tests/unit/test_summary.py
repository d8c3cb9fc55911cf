"""collector/summary.py: the short end-of-run summary over hand-made jobs."""

from __future__ import annotations

import numpy as np

from tfprof.collector.model import RECORD_COLUMNS, DeviceMeta, DropCounts, JobData, StreamData
from tfprof.collector.summary import short_summary
from tfprof.core.records import RecordKind

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


def test_counts_bytes_and_dropped() -> None:
    lines = short_summary([make_job()]).splitlines()
    assert lines[0] == "tfprof: job train: 2 traced processes, 1 GPU"
    assert lines[1] == (
        "  kernels 5 (11.000 ms), copies 2 (3.0 MB, 0.750 ms), memsets 1; dropped 7"
    )


def test_top_kernels_in_order_of_total_time() -> None:
    lines = short_summary([make_job()]).splitlines()
    top = [line.split() for line in lines[2:]]
    # relu (1 + 4.5 ms, two processes) outranks gemm (3 + 2 ms), seen first.
    assert [row[-1] for row in top] == ["relu", "gemm", "softmax"]
    assert [row[-2] for row in top] == ["2x", "2x", "1x"]
    assert [row[0] for row in top] == ["50.0%", "45.5%", "4.5%"]
    assert [row[1] for row in top] == ["5.500", "5.000", "0.500"]

    limited = short_summary([make_job()], top=1).splitlines()
    assert len(limited) == 3
    assert limited[2].endswith("relu")


def test_gpus_are_counted_by_physical_identity() -> None:
    job = make_job()
    job.streams[1].devices = {0: DeviceMeta(ordinal=0, uuid="GPU-b")}
    assert "2 traced processes, 2 GPUs" in short_summary([job])


def test_long_kernel_names_are_shortened() -> None:
    name = "void cutlass::Kernel<" + "x" * 100 + ">"
    job = JobData(name="j", run_id="r", streams=[stream(1, [(K, 10, 1, 0, 0)], ["", name])])
    last = short_summary([job]).splitlines()[-1]
    assert last.endswith(name[:57] + "...")
    assert name not in last


def test_several_jobs_and_none() -> None:
    other = JobData(name="eval", run_id="r2", streams=[stream(9, [], [""])])
    text = short_summary([make_job(), other])
    assert "tfprof: job train: 2 traced processes" in text
    assert "tfprof: job eval: 1 traced process, 0 GPUs\n" in text
    assert "  kernels 0 (0.000 ms), copies 0 (0.0 MB, 0.000 ms), memsets 0; dropped 0" in text
    assert short_summary([]) == "tfprof: no traced processes\n"
