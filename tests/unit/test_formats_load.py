"""Readers of our own Chrome export, and what every reader does with files that are not traces."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.unit.trace_docs import meta_event, write_doc, x_event
from tfprof.readers import (
    FORMAT_TFPROF,
    TraceFormatError,
    load_trace,
)


def _tfprof_doc(tasks: list[str], group_by: str = "job") -> dict[str, Any]:
    """The shape collector/export/chrome.py writes: kind in cat, Kineto-style args."""
    events: list[dict[str, Any]] = []
    for i, task in enumerate(tasks):
        stream, memcpy = (
            f"/job:train/task:{task}/gpu:0/stream:7",
            f"/job:train/task:{task}/gpu:0/memcpy",
        )
        if group_by == "job":
            stream_at, memcpy_at = (10 + 2 * i, 1), (11 + 2 * i, 2)
            events += [meta_event(stream_at[0], stream), meta_event(memcpy_at[0], memcpy)]
        else:  # one process per physical GPU, one thread per track (and per extra lane)
            stream_at, memcpy_at = (1, 10 + 3 * i), (1, 11 + 3 * i)
            events += [meta_event(1, "/gpu:GPU-1234 (NVIDIA A100)")]
            events += [{"ph": "M", "name": "thread_name", "pid": 1, "tid": tid, "args": {"name": n}}
                       for tid, n in ((stream_at[1], stream), (memcpy_at[1], memcpy),
                                      (12 + 3 * i, f"{stream} lane 1"))]  # fmt: skip
        common = {"correlation": 3, "device": 0, "stream": 7, "context": 1}
        copy = {"ph": "X", "cat": "memcpy", "name": "", "ts": 3.0, "dur": 1.0,
                "args": {"bytes": 4096, "kind": "HtoD", "src kind": "pinned",
                         "dst kind": "device", "GB/s": 4.096, **common}}  # fmt: skip
        lane1 = stream_at if group_by == "job" else (1, 12 + 3 * i)
        events += [
            {"ph": "X", "cat": "kernel", "name": "sgemm", "pid": stream_at[0], "tid": stream_at[1],
             "ts": 0.5, "dur": 2.25, "args": {"grid": "(4, 2, 1)", "block": "(128, 1, 1)",
             "registers per thread": 64, "static shared memory": 256,
             "dynamic shared memory": 1024, **common}},
            {**copy, "pid": stream_at[0], "tid": stream_at[1]},
            {**copy, "pid": memcpy_at[0], "tid": memcpy_at[1]},
            {"ph": "X", "cat": "memset", "name": "", "pid": lane1[0], "tid": lane1[1],
             "ts": 5.0, "dur": 0.5, "args": {"bytes": 64, "memory kind": "device", **common}},
        ]  # fmt: skip
    events.append(meta_event(99, "/job:train/task:0/cpu"))
    events.append({"ph": "C", "name": "cpu_percent", "pid": 99, "ts": 0.0, "args": {"v": 1}})
    meta = {"tool": {"name": "tfprof-agent", "version": "0.1.0"}, "group_by": group_by}
    return {"displayTimeUnit": "ns", "otherData": meta, "traceEvents": events}


@pytest.mark.parametrize("group_by", ["job", "gpu"])
def test_tfprof_export_imports_copies_once(tmp_path: Path, group_by: str) -> None:
    trace = load_trace(write_doc(tmp_path, _tfprof_doc(["0"], group_by)))
    assert trace.format == FORMAT_TFPROF
    assert trace.per_stream_counts() == {(0, 7): {"kernel": 1, "memcpy": 1, "memset": 1}}
    c = trace.columns
    assert list(c["start_ns"]) == [0, 2500, 4500]
    assert list(c["duration_ns"]) == [2250, 1000, 500]
    kernel = [c[k][0] for k in ("grid_x", "block_x", "registers", "static_smem", "dynamic_smem")]
    assert kernel == [4, 128, 64, 256, 1024]
    assert (c["copy_kind"][1], c["src_kind"][1], c["dst_kind"][1], c["bytes"][1]) == (1, 2, 3, 4096)
    assert (c["src_kind"][2], c["bytes"][2]) == (3, 64)
    assert list(c["correlation"]) == [3, 3, 3]


def test_tfprof_export_gives_each_task_its_own_device(tmp_path: Path) -> None:
    trace = load_trace(write_doc(tmp_path, _tfprof_doc(["0", "1"])))
    assert sorted(trace.per_stream_counts()) == [(0, 7), (1, 7)]
    assert [d["ordinal"] for d in trace.devices] == [0, 1]


def test_tfprof_hand_written_form_with_kind_in_args(tmp_path: Path) -> None:
    events = [
        meta_event(5, "/job:j/task:3/gpu:2/stream:9"),
        x_event(5, 1.25, 1, "k", kind="kernel"),
        x_event(5, 2, 1, "", kind="memcpy", bytes=8, copy_kind=2, src_kind=3, dst_kind="pageable"),
    ]
    doc = {"traceEvents": events, "metadata": {"tfprof": {}}}
    trace = load_trace(write_doc(tmp_path, doc))
    assert trace.format == FORMAT_TFPROF
    assert trace.per_stream_counts() == {(2, 9): {"kernel": 1, "memcpy": 1, "memset": 0}}
    assert [trace.column(k)[1] for k in ("copy_kind", "src_kind", "dst_kind")] == [2, 3, 1]
    assert list(trace.column("start_ns")) == [0, 750]


# -- containers and errors ------------------------------------------------------------


def test_gzip_is_detected_by_content_not_suffix(tmp_path: Path) -> None:
    doc = _tfprof_doc(["0"])
    zipped = load_trace(write_doc(tmp_path, doc, "looks-plain.json", gz=True))
    plain = load_trace(write_doc(tmp_path, doc, "looks-zipped.json.gz"))
    assert zipped.columns == plain.columns
    assert len(zipped) == 3


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"this is not json", "not JSON"),
        (b"", "not JSON"),
        (b"\x1f\x8b\x08\x00garbage", "corrupt gzip"),
        (b'{"traceEvents": []}', "traceEvents is empty"),
        (b'{"displayTimeUnit": "ns"}', "without a traceEvents"),
        (b'{"traceEvents": {"a": 1}}', "not a list"),
        (b"\xff\xfe\x00", "not JSON"),
    ],
)
def test_unreadable_files_raise_trace_format_error(
    tmp_path: Path, content: bytes, message: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(TraceFormatError, match=message) as info:
        load_trace(path)
    assert str(path) in str(info.value)
    assert "\n" not in str(info.value)


def test_cpu_only_traces_are_rejected(tmp_path: Path) -> None:
    tf_cpu = {
        "traceEvents": [
            meta_event(1, "/job:localhost/replica:0/task:0/cpu:0 Compute"),
            x_event(1, 10, 5, "MatMul", name="MatMul", op="MatMul"),
        ]
    }
    kineto_cpu = {
        "traceEvents": [
            {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1,
             "ts": 1, "dur": 2},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
             "ts": 2, "dur": 1, "args": {"correlation": 4}},
        ]
    }  # fmt: skip
    tf_idle_gpu = {
        "traceEvents": [meta_event(1, "/gpu:0/stream:all Compute"), x_event(1, 1, 1, "k")]
    }
    for doc in (tf_cpu, kineto_cpu, tf_idle_gpu):
        with pytest.raises(TraceFormatError, match="no GPU events"):
            load_trace(write_doc(tmp_path, doc))


def test_non_numeric_timestamp_is_a_format_error(tmp_path: Path) -> None:
    events = [{"ph": "X", "cat": "kernel", "name": "k", "ts": "soon", "dur": 1, "args": {}}]
    with pytest.raises(TraceFormatError, match="non-numeric ts"):
        load_trace(write_doc(tmp_path, {"traceEvents": events}))


def test_missing_file_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        load_trace(tmp_path / "absent.json")
