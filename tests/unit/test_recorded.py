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
from tests.unit.recorded_files import KINETO_FILES, TF_FILES
from tests.unit.trace_docs import meta_event, write_doc, x_event
from tfprof.readers import (
    FORMAT_KINETO,
    FORMAT_TF_TIMELINE,
    RecordedTrace,
    load_trace,
)

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


_GPU_KINDS = (1, 2, 3, 4)


def _records(trace: RecordedTrace) -> Counter[tuple[int, int, str, int, int, int]]:
    """Multiset of the GPU records' (start_ns from the first GPU record, duration_ns, name,
    kind, device, stream); host records (API calls, ranges) may start earlier."""
    c = trace.columns
    first = min(s for s, k in zip(c["start_ns"], c["kind"], strict=True) if k in _GPU_KINDS)
    return Counter(
        (s - first, d, trace.names[n], k, dev, st)
        for s, d, n, k, dev, st in zip(
            c["start_ns"],
            c["duration_ns"],
            c["name"],
            c["kind"],
            c["device"],
            c["stream"],
            strict=True,
        )
        if k in _GPU_KINDS
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
    assert sum(k in _GPU_KINDS for k in trace.column("kind")) == TF_TOTALS[filename]
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
    c = trace.columns
    gpu = [i for i, k in enumerate(c["kind"]) if k in _GPU_KINDS]
    rows = {trace.names[c["name"][i]]: i for i in gpu}
    # first GPU event of the file (an HtoD on stream 13) and a MatMul kernel 113.05 ms later
    first = rows["edge_185__recv_Placeholder_1_0"]
    assert first == gpu[0]
    g0 = c["start_ns"][first]  # host op ranges start earlier
    assert c["duration_ns"][first] == 1000
    assert (c["kind"][first], c["stream"][first], c["copy_kind"][first]) == (2, 13, 1)
    assert c["dst_kind"][first] == 3  # device memory
    # The op's name is on a kernel (stream 12) and on a copy it issued (stream 7, with a
    # memcpy-track twin and no stream:all twin): the copy must not pass for a kernel.
    named = [i for i in gpu if trace.names[c["name"][i]] == "layer_1/fully_connected/MatMul"]
    assert sorted((c["stream"][i], c["kind"][i], c["copy_kind"][i]) for i in named) == [
        (7, 2, 0),
        (12, 1, 0),
    ]
    kernel = rows["gradients/layer_1/fully_connected/MatMul_grad/MatMul"]
    assert c["kind"][kernel] == 1 and c["stream"][kernel] == 12
    assert c["start_ns"][kernel] - g0 == (1490280136430555 - 1490280136316635) * 1000
    assert c["duration_ns"][kernel] == 79_000
    dtoh = rows["edge_9_gradients/Mean_grad/Prod"]
    assert (c["copy_kind"][dtoh], c["src_kind"][dtoh], c["stream"][dtoh]) == (2, 3, 14)


def test_tf_timeline_device_path_names_and_stream_all(tmp_path: Path) -> None:
    base = "/job:localhost/replica:0/task:0/device:GPU:1"
    events = [
        meta_event(1, f"{base}/stream:all Compute"),
        meta_event(2, f"{base}/stream:7 Compute"),
        meta_event(3, f"{base}/memcpy Compute"),
        meta_event(4, f"{base}/stream:7 Tensors"),
        meta_event(5, "/job:localhost/replica:0/task:0/device:CPU:0 Compute"),
        x_event(1, 100, 5, "MatMul", name="dense/MatMul", op="MatMul"),
        x_event(2, 100, 5, "MatMul", name="dense/MatMul", op="MatMul"),
        x_event(2, 90, 2, "MEMCPYHtoD", name="edge_1_x", op="MEMCPYHtoD 64 bytes"),
        x_event(3, 90, 2, "MEMCPYHtoD", name="edge_1_x", op="MEMCPYHtoD 64 bytes"),
        x_event(3, 200, 1, "MEMCPYDtoD", name="edge_2_y", op="MEMCPYDtoD"),  # no stream twin
        x_event(5, 50, 500, "MatMul", name="cpu/MatMul", op="MatMul"),
    ]
    trace = load_trace(write_doc(tmp_path, {"traceEvents": events}))
    assert trace.per_stream_counts() == {
        (1, 7): {"kernel": 1, "memcpy": 1, "memset": 0},
        (1, 0): {"kernel": 0, "memcpy": 1, "memset": 0},
    }
    c = trace.columns
    # the CPU op (the executor's device track) is a host range, named <node>:<type>
    assert list(c["kind"]) == [6, 2, 1, 2]
    assert list(c["start_ns"]) == [0, 40_000, 50_000, 150_000]
    assert list(c["copy_kind"]) == [0, 1, 0, 8]
    assert list(c["bytes"]) == [0, 64, 0, 0]
    assert [trace.names[n] for n in c["name"]] == [
        "cpu/MatMul:MatMul",
        "edge_1_x",
        "dense/MatMul",
        "edge_2_y",
    ]
    assert (c["thread"][0], trace.names[c["category"][0]], c["duration_ns"][0]) == (
        1,
        "tf_op",
        500_000,
    )


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
    corr = sorted(
        c
        for c, k in zip(trace.column("correlation"), trace.column("kind"), strict=True)
        if k in _GPU_KINDS
    )
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
    # the runtime call, 667.5 µs before the kernel, is an API record on its thread and
    # names no device; the GPU records follow
    assert (c["kind"][0], c["thread"][0], c["correlation"][0], c["category"][0]) == (5, 9, 5, 1)
    # 2.0015 µs = 2001.5 ns and 2.7505 µs = 2750.5 ns: both round half to even
    assert list(c["start_ns"]) == [0, 667_500, 670_250, 680_000]
    assert list(c["duration_ns"]) == [1000, 2002, 3000, 1000]
    assert list(c["bytes"]) == [0, 0, 7500, 7]  # 2.5 GB/s for 3 µs
    assert list(c["copy_kind"]) == [0, 0, 2, 10]
    assert list(c["src_kind"]) == [0, 0, 3, 3]
    assert list(c["dst_kind"]) == [0, 0, 2, 3]
    assert list(c["device"]) == [0, 1, 1, 1]
    assert [d["ordinal"] for d in trace.devices] == [1]


# -- tfprof's own export --------------------------------------------------------------
