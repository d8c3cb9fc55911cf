"""Importers of recorded GPU traces, checked against counts taken directly from the JSON."""

from __future__ import annotations

import gzip
import json
from collections import Counter, defaultdict
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from tests.traces import TRACES, needs_traces
from tfprof.core.formats import (
    FORMAT_KINETO,
    FORMAT_TF_TIMELINE,
    FORMAT_TFPROF,
    RecordedTrace,
    TraceFormatError,
    load_trace,
)

TF_FILES = [
    "GPU_timeline_01.json",
    "GPU_timeline_02_step_0.json",
    "GPU_timeline_02_step_1.json",
    "GPU_timeline_02_step_2.json",
    "GPU_timeline_03_merged_5_runs.json",
]
KINETO_FILES = ["event_sync_multi_stream.json.gz", "simple_add.json.gz"]
# Records per TF file: per-stream kernels + copies (each copy once).
TF_TOTALS = {
    "GPU_timeline_01.json": 9,
    "GPU_timeline_02_step_0.json": 45,
    "GPU_timeline_02_step_1.json": 44,
    "GPU_timeline_02_step_2.json": 44,
    "GPU_timeline_03_merged_5_runs.json": 221,
}


def _raw(path: Path) -> dict[str, Any]:
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    doc: dict[str, Any] = json.loads(data)
    return doc


def _records(trace: RecordedTrace) -> Counter[tuple[int, int, str, int, int, int]]:
    """Multiset of (start_ns, duration_ns, name, kind, device, stream)."""
    c = trace.columns
    return Counter(
        (s, d, trace.names[n], k, dev, st)
        for s, d, n, k, dev, st in zip(
            c["start_ns"],
            c["duration_ns"],
            c["name"],
            c["kind"],
            c["device"],
            c["stream"],
            strict=True,
        )
    )


def _check_columns(trace: RecordedTrace) -> None:
    starts = list(trace.column("start_ns"))
    assert starts == sorted(starts)
    assert starts[0] == 0
    assert all(len(col) == len(trace) for col in trace.columns.values())
    assert trace.span_ns == max(
        s + d for s, d in zip(starts, trace.column("duration_ns"), strict=True)
    )


# -- TensorFlow timeline ------------------------------------------------------------


def _tf_tracks(raw: dict[str, Any]) -> dict[int, str]:
    return {
        e["pid"]: e["args"]["name"]
        for e in raw["traceEvents"]
        if e.get("ph") == "M" and e.get("name") == "process_name"
    }


@needs_traces
@pytest.mark.parametrize("filename", TF_FILES)
def test_tf_timeline_counts_match_the_raw_json(filename: str) -> None:
    path = TRACES / "tf-timeline-ikhlestov" / filename  # type: ignore[operator]
    raw = _raw(path)
    tracks = _tf_tracks(raw)

    def key(e: dict[str, Any]) -> tuple[Any, ...]:
        return (e["ts"], e["dur"], e["args"]["name"])

    by_track: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in raw["traceEvents"]:
        if e.get("ph") == "X":
            by_track[tracks[e["pid"]]].append(e)
    # TF saves each kernel on stream:all too and each copy on memcpy too: use those
    # twins to classify every per-stream event, independently of the importer's rule.
    kernels = Counter(key(e) for e in by_track["/gpu:0/stream:all Compute"])
    copies = Counter(key(e) for e in by_track["/gpu:0/memcpy Compute"])
    expected: dict[tuple[int, int], dict[str, int]] = {}
    starts: list[int] = []
    for track, events in by_track.items():
        if not track.startswith("/gpu:0/stream:") or "stream:all" in track:
            continue
        stream = int(track.split("stream:")[1].split()[0])
        per = expected.setdefault((0, stream), {"kernel": 0, "memcpy": 0, "memset": 0})
        for e in events:
            in_all, in_memcpy = kernels[key(e)] > 0, copies[key(e)] > 0
            assert in_all != in_memcpy, f"ambiguous event {e}"
            per["kernel" if in_all else "memcpy"] += 1
            starts.append(e["ts"])

    trace = load_trace(path)
    assert trace.format == FORMAT_TF_TIMELINE
    assert trace.per_stream_counts() == expected
    assert len(trace) == TF_TOTALS[filename]
    assert sum(v["kernel"] for v in expected.values()) == sum(kernels.values())
    assert sum(v["memcpy"] for v in expected.values()) == sum(copies.values())
    _check_columns(trace)
    assert [d["ordinal"] for d in trace.devices] == [0]


@needs_traces
@pytest.mark.parametrize("filename", TF_FILES)
def test_tf_timeline_keeps_every_time_and_duration(filename: str) -> None:
    path = TRACES / "tf-timeline-ikhlestov" / filename  # type: ignore[operator]
    raw = _raw(path)
    tracks = _tf_tracks(raw)
    per_stream = [
        e
        for e in raw["traceEvents"]
        if e.get("ph") == "X"
        and "/gpu:0/stream:" in tracks[e["pid"]]
        and "stream:all" not in tracks[e["pid"]]
    ]
    origin = min(e["ts"] for e in per_stream)
    expected = Counter(
        ((e["ts"] - origin) * 1000, e["dur"] * 1000, e["args"]["name"]) for e in per_stream
    )
    trace = load_trace(path)
    got = Counter((s, d, name) for s, d, name, *_ in _records(trace).elements())
    assert got == expected


@needs_traces
def test_tf_timeline_known_events() -> None:
    trace = load_trace(TRACES / "tf-timeline-ikhlestov" / "GPU_timeline_02_step_0.json")  # type: ignore[operator]
    rows = {trace.names[n]: i for i, n in enumerate(trace.column("name"))}
    c = trace.columns
    # first event of the file (an HtoD on stream 13) and a MatMul kernel 113.05 ms later
    first = rows["edge_185__recv_Placeholder_1_0"]
    assert (c["start_ns"][first], c["duration_ns"][first]) == (0, 1000)
    assert (c["kind"][first], c["stream"][first], c["copy_kind"][first]) == (2, 13, 1)
    assert c["dst_kind"][first] == 3  # device memory
    # The op's name is on a kernel (stream 12) and on a copy it issued (stream 7, with a
    # memcpy-track twin and no stream:all twin): the copy must not pass for a kernel.
    named = [
        i for i, n in enumerate(c["name"]) if trace.names[n] == "layer_1/fully_connected/MatMul"
    ]
    assert sorted((c["stream"][i], c["kind"][i], c["copy_kind"][i]) for i in named) == [
        (7, 2, 0),
        (12, 1, 0),
    ]
    kernel = rows["gradients/layer_1/fully_connected/MatMul_grad/MatMul"]
    assert c["kind"][kernel] == 1 and c["stream"][kernel] == 12
    assert c["start_ns"][kernel] == (1490280136430555 - 1490280136316635) * 1000
    assert c["duration_ns"][kernel] == 79_000
    dtoh = rows["edge_9_gradients/Mean_grad/Prod"]
    assert (c["copy_kind"][dtoh], c["src_kind"][dtoh], c["stream"][dtoh]) == (2, 3, 14)


def _write(tmp_path: Path, doc: Any, name: str = "trace.json", gz: bool = False) -> Path:
    data = json.dumps(doc).encode()
    path = tmp_path / name
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def _meta(pid: int, name: str) -> dict[str, Any]:
    return {"ph": "M", "name": "process_name", "pid": pid, "args": {"name": name}}


def _x(pid: int, ts: Any, dur: Any, label: str, /, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": "Op", "pid": pid, "tid": 0, "ts": ts, "dur": dur, "name": label,
            "args": args}  # fmt: skip


def test_tf_timeline_device_path_names_and_stream_all(tmp_path: Path) -> None:
    base = "/job:localhost/replica:0/task:0/device:GPU:1"
    events = [
        _meta(1, f"{base}/stream:all Compute"),
        _meta(2, f"{base}/stream:7 Compute"),
        _meta(3, f"{base}/memcpy Compute"),
        _meta(4, f"{base}/stream:7 Tensors"),
        _meta(5, "/job:localhost/replica:0/task:0/device:CPU:0 Compute"),
        _x(1, 100, 5, "MatMul", name="dense/MatMul", op="MatMul"),
        _x(2, 100, 5, "MatMul", name="dense/MatMul", op="MatMul"),
        _x(2, 90, 2, "MEMCPYHtoD", name="edge_1_x", op="MEMCPYHtoD 64 bytes"),
        _x(3, 90, 2, "MEMCPYHtoD", name="edge_1_x", op="MEMCPYHtoD 64 bytes"),
        _x(3, 200, 1, "MEMCPYDtoD", name="edge_2_y", op="MEMCPYDtoD"),  # no stream twin
        _x(5, 50, 500, "MatMul", name="cpu/MatMul", op="MatMul"),
    ]
    trace = load_trace(_write(tmp_path, {"traceEvents": events}))
    assert trace.per_stream_counts() == {
        (1, 7): {"kernel": 1, "memcpy": 1, "memset": 0},
        (1, 0): {"kernel": 0, "memcpy": 1, "memset": 0},
    }
    c = trace.columns
    assert list(c["start_ns"]) == [0, 10_000, 110_000]
    assert list(c["copy_kind"]) == [1, 0, 8]
    assert list(c["bytes"]) == [64, 0, 0]
    assert [trace.names[n] for n in c["name"]] == ["edge_1_x", "dense/MatMul", "edge_2_y"]


# -- Kineto ---------------------------------------------------------------------------

_GPU_CATS = {
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "gpu_memset": "memset",
    "cuda_sync": "sync",  # CUPTI SYNCHRONIZATION; stream -1 = context/event-wide
}
NO_STREAM = 0xFFFFFFFF


def _stream(e: dict[str, Any]) -> int:
    return NO_STREAM if e["args"]["stream"] == -1 else e["args"]["stream"]


@needs_traces
@pytest.mark.parametrize("filename", KINETO_FILES)
def test_kineto_counts_and_times_match_the_raw_json(filename: str) -> None:
    path = TRACES / "kineto-hta" / filename  # type: ignore[operator]
    gpu = [e for e in _raw(path)["traceEvents"] if e.get("cat") in _GPU_CATS]
    expected: dict[tuple[int, int], dict[str, int]] = {}
    for e in gpu:
        per = expected.setdefault(
            (e["args"]["device"], _stream(e)), {"kernel": 0, "memcpy": 0, "memset": 0}
        )
        per[_GPU_CATS[e["cat"]]] = per.get(_GPU_CATS[e["cat"]], 0) + 1
    trace = load_trace(path)
    assert trace.format == FORMAT_KINETO
    assert trace.per_stream_counts() == expected
    _check_columns(trace)

    origin = min(Decimal(str(e["ts"])) for e in gpu)
    kinds = {"kernel": 1, "gpu_memcpy": 2, "gpu_memset": 3, "cuda_sync": 4}
    want = Counter(
        (
            round((Decimal(str(e["ts"])) - origin) * 1000),
            round(Decimal(str(e["dur"])) * 1000),
            e["name"],
            kinds[e["cat"]],
            e["args"]["device"],
            _stream(e),
        )
        for e in gpu
    )
    assert _records(trace) == want
    corr = sorted(trace.column("correlation"))
    assert corr == sorted(e["args"]["correlation"] for e in gpu)
    assert trace.devices[0]["name"] == "NVIDIA A100-PG509-200"
    assert trace.devices[0]["sm_count"] == 108


@needs_traces
def test_kineto_kernel_copy_and_memset_fields() -> None:
    trace = load_trace(TRACES / "kineto-hta" / "event_sync_multi_stream.json.gz")  # type: ignore[operator]
    c = trace.columns
    i = [trace.names[n] for n in c["name"]].index("ampere_sgemm_128x64_nn")
    got = [c[k][i] for k in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")]
    assert got == [8, 16, 5, 128, 1, 1]
    assert (c["registers"][i], c["static_smem"][i], c["correlation"][i]) == (122, 12544, 27)
    assert (c["stream"][i], c["context"][i], c["duration_ns"][i]) == (20, 1, 123_000)
    memset = list(c["kind"]).index(3)
    assert (c["bytes"][memset], c["src_kind"][memset]) == (512, 3)

    trace = load_trace(TRACES / "kineto-hta" / "simple_add.json.gz")  # type: ignore[operator]
    c = trace.columns
    copy = list(c["kind"]).index(2)
    assert (c["copy_kind"][copy], c["src_kind"][copy], c["dst_kind"][copy]) == (1, 1, 3)
    assert c["bytes"][copy] == 92928


def _kineto_doc(events: list[dict[str, Any]]) -> str:
    return json.dumps({"schemaVersion": 1, "traceEvents": events})


def test_kineto_fractional_us_bandwidth_bytes_and_copy_names(tmp_path: Path) -> None:
    # Written by hand so the fractional digits reach the parser untouched.
    text = (
        '{"traceEvents": ['
        '{"ph": "X", "cat": "kernel", "name": "k", "pid": 1, "tid": 3, '
        '"ts": 1712867402348667.5, "dur": 2.0015, "args": {"device": 1, "stream": 3}},'
        '{"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pinned)", "pid": 1,'
        ' "tid": 3, "ts": 1712867402348670.2505, "dur": 3,'
        ' "args": {"device": 1, "stream": 3, "memory bandwidth (GB/s)": 2.5}},'
        '{"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy PtoP (Device -> Device)", "pid": 1,'
        ' "tid": 3, "ts": 1712867402348680, "dur": 1, "args": {"device": 1, "stream": 3,'
        ' "bytes": 7}},'
        '{"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 9, "tid": 9,'
        ' "ts": 1712867402348000, "dur": 1, "args": {"correlation": 5}}'
        "]}"
    )
    path = tmp_path / "k.json"
    path.write_text(text)
    trace = load_trace(path)
    c = trace.columns
    # 2.0015 µs = 2001.5 ns and 2.7505 µs = 2750.5 ns: both round half to even
    assert list(c["start_ns"]) == [0, 2750, 12500]
    assert list(c["duration_ns"]) == [2002, 3000, 1000]
    assert list(c["bytes"]) == [0, 7500, 7]  # 2.5 GB/s for 3 µs
    assert list(c["copy_kind"]) == [0, 2, 10]
    assert list(c["src_kind"]) == [0, 3, 3]
    assert list(c["dst_kind"]) == [0, 2, 3]
    assert list(c["device"]) == [1, 1, 1]
    assert [d["ordinal"] for d in trace.devices] == [1]


# -- tfprof's own export --------------------------------------------------------------


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
            events += [_meta(stream_at[0], stream), _meta(memcpy_at[0], memcpy)]
        else:  # one process per physical GPU, one thread per track (and per extra lane)
            stream_at, memcpy_at = (1, 10 + 3 * i), (1, 11 + 3 * i)
            events += [_meta(1, "/gpu:GPU-1234 (NVIDIA A100)")]
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
    events.append(_meta(99, "/job:train/task:0/cpu"))
    events.append({"ph": "C", "name": "cpu_percent", "pid": 99, "ts": 0.0, "args": {"v": 1}})
    meta = {"tool": {"name": "tfprof-agent", "version": "0.1.0"}, "group_by": group_by}
    return {"displayTimeUnit": "ns", "otherData": meta, "traceEvents": events}


@pytest.mark.parametrize("group_by", ["job", "gpu"])
def test_tfprof_export_imports_copies_once(tmp_path: Path, group_by: str) -> None:
    trace = load_trace(_write(tmp_path, _tfprof_doc(["0"], group_by)))
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
    trace = load_trace(_write(tmp_path, _tfprof_doc(["0", "1"])))
    assert sorted(trace.per_stream_counts()) == [(0, 7), (1, 7)]
    assert [d["ordinal"] for d in trace.devices] == [0, 1]


def test_tfprof_hand_written_form_with_kind_in_args(tmp_path: Path) -> None:
    events = [
        _meta(5, "/job:j/task:3/gpu:2/stream:9"),
        _x(5, 1.25, 1, "k", kind="kernel"),
        _x(5, 2, 1, "", kind="memcpy", bytes=8, copy_kind=2, src_kind=3, dst_kind="pageable"),
    ]
    doc = {"traceEvents": events, "metadata": {"tfprof": {}}}
    trace = load_trace(_write(tmp_path, doc))
    assert trace.format == FORMAT_TFPROF
    assert trace.per_stream_counts() == {(2, 9): {"kernel": 1, "memcpy": 1, "memset": 0}}
    assert [trace.column(k)[1] for k in ("copy_kind", "src_kind", "dst_kind")] == [2, 3, 1]
    assert list(trace.column("start_ns")) == [0, 750]


# -- containers and errors ------------------------------------------------------------


def test_gzip_is_detected_by_content_not_suffix(tmp_path: Path) -> None:
    doc = _tfprof_doc(["0"])
    zipped = load_trace(_write(tmp_path, doc, "looks-plain.json", gz=True))
    plain = load_trace(_write(tmp_path, doc, "looks-zipped.json.gz"))
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
            _meta(1, "/job:localhost/replica:0/task:0/cpu:0 Compute"),
            _x(1, 10, 5, "MatMul", name="MatMul", op="MatMul"),
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
    tf_idle_gpu = {"traceEvents": [_meta(1, "/gpu:0/stream:all Compute"), _x(1, 1, 1, "k")]}
    for doc in (tf_cpu, kineto_cpu, tf_idle_gpu):
        with pytest.raises(TraceFormatError, match="no GPU events"):
            load_trace(_write(tmp_path, doc))


def test_non_numeric_timestamp_is_a_format_error(tmp_path: Path) -> None:
    events = [{"ph": "X", "cat": "kernel", "name": "k", "ts": "soon", "dur": 1, "args": {}}]
    with pytest.raises(TraceFormatError, match="non-numeric ts"):
        load_trace(_write(tmp_path, {"traceEvents": events}))


def test_missing_file_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        load_trace(tmp_path / "absent.json")
