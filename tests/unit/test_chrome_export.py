"""Chrome trace JSON export: event shapes, args arithmetic, files and reporter choice."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from tests.unit.sample_timeline import render, sample_timeline, slices
from tfprof.collector.errors import InvalidArgument
from tfprof.collector.export import (
    ChromeReporter,
    UnknownFormatError,
    format_for,
    reporter_for,
    write_timeline,
)
from tfprof.collector.jobdata import HOST_COLUMNS
from tfprof.collector.merged.whole import build_timeline
from tfprof.core.counters import counter_title


def by_corr(trace: dict[str, Any], corr: int) -> list[dict[str, Any]]:
    return [e for e in slices(trace) if e["args"]["correlation"] == corr]


def proc_name(trace: dict[str, Any], pid: int) -> str:
    (name,) = [
        e["args"]["name"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["name"] == "process_name" and e["pid"] == pid
    ]
    return str(name)


def test_document_shape() -> None:
    trace = render(sample_timeline())
    assert trace["displayTimeUnit"] == "ns"
    other = trace["otherData"]
    assert other["tool"]["name"] == "tfprof-agent"
    assert other["jobs"][0]["label"] == "train"
    assert other["devices"]["train"]["0"]["0"]["uuid"] == "GPU-abc"
    # 6 records + 2 copies repeated on the memcpy track
    assert len(slices(trace)) == 8


def test_the_head_names_the_tool_before_any_event(tmp_path: Path) -> None:
    from tfprof.collector.read.trace_job import _starts_like_our_export
    from tfprof.readers.load import json_trace_head

    out = write_timeline(sample_timeline(), tmp_path / "t.json")
    head = json_trace_head(out)  # read from the start of the file, up to traceEvents
    assert head is not None and head["metadata"]["tool"]["name"] == "tfprof-agent"
    assert _starts_like_our_export(str(out))


def test_times_are_relative_fractional_microseconds() -> None:
    trace = render(sample_timeline())
    (k1,) = by_corr(trace, 11)
    (k2,) = by_corr(trace, 12)
    assert (k1["ts"], k1["dur"]) == (0.0, 1234.567)
    assert (k2["ts"], k2["dur"]) == (1.5, 2.5)
    assert {e["ts"] for e in by_corr(trace, 13)} == {2000.0}
    assert min(e["ts"] for e in slices(trace)) == 0.0


def test_kernel_event() -> None:
    trace = render(sample_timeline())
    (k,) = by_corr(trace, 11)
    assert k["name"] == 'gemm<"fp16">\\kernel'  # escaped and back
    assert k["cat"] == "kernel"
    assert k["args"] == {
        "grid": "(128, 2, 1)",
        "block": "(256, 1, 1)",
        "registers per thread": 40,
        "static shared memory": 1024,
        "dynamic shared memory": 2048,
        "correlation": 11,
        "device": 0,
        "stream": 7,
        "context": 1,
    }
    assert proc_name(trace, k["pid"]) == "/job:train/task:0/gpu:0/stream:7"


def test_copy_events_on_stream_and_memcpy_with_rate() -> None:
    trace = render(sample_timeline())
    copies = by_corr(trace, 13)
    assert sorted(proc_name(trace, e["pid"]) for e in copies) == [
        "/job:train/task:0/gpu:0/memcpy",
        "/job:train/task:0/gpu:0/stream:13",
    ]
    for e in copies:
        assert e["name"] == "MEMCPYHtoD" and e["cat"] == "memcpy"
        assert e["args"] == {
            "bytes": 1_000_000,
            "kind": "HtoD",
            "src kind": "pageable",
            "dst kind": "device",
            "GB/s": 2.0,
            "correlation": 13,
            "device": 0,
            "stream": 13,
            "context": 1,
        }
    peer = by_corr(trace, 14)[0]
    assert peer["name"] == "MEMCPYPtoP"
    assert peer["args"]["GB/s"] is None
    assert peer["args"]["dst device"] == 1
    assert "dst device" not in copies[0]["args"]


def test_memset_and_unknown_kind_events() -> None:
    trace = render(sample_timeline())
    (ms,) = by_corr(trace, 15)
    assert (ms["name"], ms["cat"]) == ("MEMSET", "memset")
    assert ms["args"]["bytes"] == 4096 and ms["args"]["memory kind"] == "device"
    (odd,) = by_corr(trace, 16)
    assert (odd["name"], odd["cat"], odd["args"]["kind"]) == ("unknown activity", "activity", 9)


def test_metadata_events_and_lanes() -> None:
    trace = render(sample_timeline())
    meta = [e for e in trace["traceEvents"] if e["ph"] == "M"]
    procs = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    order = {e["pid"]: e["args"]["sort_index"] for e in meta if e["name"] == "process_sort_index"}
    assert [procs[p] for p in sorted(order, key=order.__getitem__)] == [
        "/job:train/task:0/gpu:0/stream:7",
        "/job:train/task:0/gpu:0/stream:13",
        "/job:train/task:0/gpu:0/memcpy",
        "/job:train/task:0/cpu",
    ]
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    (k1,) = by_corr(trace, 11)
    (k2,) = by_corr(trace, 12)
    assert threads[(k1["pid"], k1["tid"])] == "lane 0"
    assert threads[(k2["pid"], k2["tid"])] == "lane 1"
    assert all(e["pid"] >= 1 and e["tid"] >= 1 for e in trace["traceEvents"] if "tid" in e)
    assert {(e["pid"], e["tid"]) for e in slices(trace)} <= set(threads)


def test_gpu_grouping_threads() -> None:
    trace = render(sample_timeline("gpu"))
    (k2,) = by_corr(trace, 12)
    assert proc_name(trace, k2["pid"]) == "/gpu:GPU-abc (NVIDIA H100)"
    (thread,) = [
        e["args"]["name"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["name"] == "thread_name" and e["tid"] == k2["tid"]
    ]
    assert thread == "/job:train/task:0/gpu:0/stream:7 lane 1"


def test_host_counters() -> None:
    trace = render(sample_timeline())
    counters = [e for e in trace["traceEvents"] if e["ph"] == "C"]
    # One event per series and sample, named so that viewers call the counter
    # "<name> <key>" as the Perfetto export calls its track: "cpu percent", "rss bytes"
    cpu = [e for e in counters if e["name"] == "cpu"]
    assert [(e["ts"], e["args"]) for e in cpu] == [
        (0.01, {"percent": 12.5}),
        (1000.01, {"percent": 99.0}),
    ]
    rss = [e["args"]["bytes"] for e in counters if e["name"] == "rss"]
    assert rss == [1 << 30, 2 << 30]
    assert {proc_name(trace, e["pid"]) for e in counters} == {"/job:train/task:0/cpu"}
    titles = {f"{e['name']} {key}" for e in counters for key in e["args"]}
    assert titles == {counter_title(series) for series in HOST_COLUMNS[1:]}
    assert len(titles) == len({e["name"] for e in counters})  # one chart per series


def test_chunking_does_not_change_the_output() -> None:
    tl = sample_timeline()
    assert render(tl, chunk_events=1) == render(tl)


def test_empty_timeline_renders() -> None:
    trace = render(build_timeline([]))
    assert trace["traceEvents"] == []


def test_write_json_and_gzip(tmp_path: Path) -> None:
    tl = sample_timeline()
    plain = write_timeline(tl, tmp_path / "trace.json")
    zipped = write_timeline(tl, tmp_path / "trace.json.gz")
    assert plain.read_bytes()[:1] == b"{"
    assert zipped.read_bytes()[:2] == b"\x1f\x8b"
    from_plain = json.loads(plain.read_bytes())
    with gzip.open(zipped, "rb") as f:
        from_gzip = json.loads(f.read())
    assert from_plain == from_gzip == render(tl)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace.json", "trace.json.gz"]


def test_explicit_format_overrides_suffix(tmp_path: Path) -> None:
    out = write_timeline(sample_timeline(), tmp_path / "trace.out", fmt="chrome")
    assert len(slices(json.loads(out.read_bytes()))) == 8


def test_reporter_choice() -> None:
    assert reporter_for("a/b/trace.json") is ChromeReporter
    assert reporter_for(Path("trace.JSON.GZ")) is ChromeReporter
    assert reporter_for("trace.bin", "chrome") is ChromeReporter
    assert format_for("x.json.gz") == "chrome"


def test_unknown_suffix_raises_typed_error(tmp_path: Path) -> None:
    with pytest.raises(UnknownFormatError) as err:
        reporter_for("trace.txt")
    message = str(err.value)
    assert "trace.txt" in message and "chrome" in message and ".json.gz" in message
    with pytest.raises(UnknownFormatError, match="'protobuf'"):
        reporter_for("trace.json", "protobuf")
    with pytest.raises(UnknownFormatError):
        write_timeline(sample_timeline(), tmp_path / "trace.gz")
    assert list(tmp_path.iterdir()) == []
    # A user's mistake: the CLI reports it and exits 2, like every InvalidArgument.
    assert issubclass(UnknownFormatError, InvalidArgument)
