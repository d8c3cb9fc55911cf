"""Trace files read a chunk of events at a time give exactly what reading them whole gives.

The reference is the standard library's path (``read_json_trace`` + ``load_events``: the
whole file parsed, every reader over the full event list); ``load_trace`` streams with
msgspec and must agree record for record on the real traces and on files built to trip
it: cuts between every event, strings that look like JSON, keys after the events, NaN,
process names after their events, a format the first events do not show. Without
msgspec or numpy the result is the same too.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from tests.traces import shared_traces
from tests.unit.recorded_files import KINETO_FILES, TF_FILES
from tests.unit.trace_docs import meta_event, write_doc, x_event
from tfprof.readers import (
    RecordedTrace,
    TraceFormatError,
    load_events,
    load_trace,
    read_json_trace,
)
from tfprof.readers.events import stream_events
from tfprof.readers.jsonstream import EventChunks
from tfprof.readers.trace import NotStreamable

pytest.importorskip("msgspec")


def whole(path: Path) -> RecordedTrace:
    events, meta = read_json_trace(path)
    return load_events(str(path), events, meta)


def streamed(path: Path, block_bytes: int) -> RecordedTrace:
    chunks = EventChunks(path, block_bytes)
    return stream_events(str(path), chunks, chunks.meta)


def same(a: RecordedTrace, b: RecordedTrace) -> None:
    assert (a.format, a.names, a.devices) == (b.format, b.names, b.devices)
    assert (a.flow_stats, a.origin_ns) == (b.flow_stats, b.origin_ns)
    assert a.columns.keys() == b.columns.keys()
    for name, column in a.columns.items():
        assert column.tolist() == b.columns[name].tolist(), name


def real_traces() -> list[Path]:
    root = shared_traces()
    return [root / "kineto-hta" / f for f in KINETO_FILES] + [
        root / "tf-timeline-ikhlestov" / f for f in TF_FILES
    ]


def read_doc(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    assert isinstance(doc, dict)
    return doc


@pytest.mark.parametrize("block_bytes", [64, 4096, 1 << 20])
def test_real_traces_stream_to_the_same_records(block_bytes: int) -> None:
    for path in real_traces():
        same(streamed(path, block_bytes), whole(path))
        same(load_trace(path), whole(path))


def test_chunks_hold_every_event_and_the_keys_on_both_sides(tmp_path: Path) -> None:
    events = read_doc(shared_traces() / "kineto-hta" / "simple_add.json.gz")["traceEvents"]
    doc = {"before": [{"a": 1}, {"b": "}, {"}], "traceEvents": [*events, 7, "x"]}
    doc["after"] = [{"c": 1.5}, {"d": [1, 2]}]
    path = write_doc(tmp_path, doc, "keys.json")
    chunks = EventChunks(path, 256)
    got = [e for chunk in chunks for e in chunk]
    expected, meta = read_json_trace(path)
    assert got == expected  # dicts only, as read_json_trace keeps, Decimal floats alike
    assert chunks.events == len(events) + 2
    assert chunks.meta == {"before": doc["before"], "after": [{"c": Decimal("1.5")}, {"d": [1, 2]}]}
    assert {k: v for k, v in meta.items() if k != "traceEvents"} == chunks.meta


def test_strings_that_look_like_json_and_fractional_times(tmp_path: Path) -> None:
    doc = read_doc(shared_traces() / "kineto-hta" / "simple_add.json.gz")
    for i, e in enumerate(doc["traceEvents"]):
        if e.get("cat") == "cpu_op" and i % 2:
            e["name"] += ' }, {"cat": "kernel"} ], [ é \u2603'
    text = json.dumps(doc, indent=1)
    # Kineto since PyTorch 2 writes ns as fractional us: 1694039968933321.123
    text = re.sub(r'"ts": (\d+)', lambda m: f'"ts": {m.group(1)}.{int(m.group(1)) % 997:03d}', text)
    path = tmp_path / "tricky.json.gz"
    path.write_bytes(gzip.compress(text.encode()))
    for block_bytes in (97, 1 << 20):
        same(streamed(path, block_bytes), whole(path))
    assert whole(path).origin_ns % 1000  # the fractions made it into the ns


def test_nan_and_a_bare_array_are_read_exactly(tmp_path: Path) -> None:
    doc = read_doc(shared_traces() / "kineto-hta" / "simple_add.json.gz")
    events = doc["traceEvents"]
    events[400]["nan"] = float("nan")  # json writes NaN, which only json reads
    nan = write_doc(tmp_path, {"traceEvents": events}, "nan.json")
    bare = write_doc(tmp_path, events, "bare.json")
    for path in (nan, bare):
        same(streamed(path, 300), whole(path))
        same(load_trace(path), whole(path))


def tf_doc() -> dict[str, Any]:
    return read_doc(
        shared_traces() / "tf-timeline-ikhlestov" / "GPU_timeline_03_merged_5_runs.json"
    )


def test_tf_process_names_after_their_events_are_read_whole(tmp_path: Path) -> None:
    events = tf_doc()["traceEvents"]
    names = [e for e in events if e.get("ph") == "M"]
    rest = [e for e in events if e.get("ph") != "M"]
    late = write_doc(tmp_path, {"traceEvents": rest + names}, "late.json")
    renamed = write_doc(
        tmp_path,
        {"traceEvents": [*names, *rest, meta_event(names[7]["pid"], "/gpu:0/stream:99 Compute")]},
        "renamed.json",
    )
    for path in (late, renamed):
        with pytest.raises(NotStreamable):
            streamed(path, 1 << 20)
        same(load_trace(path), whole(path))


def test_a_guess_from_the_first_events_is_checked_against_the_whole_file(tmp_path: Path) -> None:
    events = tf_doc()["traceEvents"]
    kernel = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": events[-1]["ts"],
              "dur": 3, "args": {"device": 0, "stream": 7}}  # fmt: skip
    path = write_doc(tmp_path, {"traceEvents": [*events, kernel]}, "kineto.json")
    with pytest.raises(NotStreamable):
        streamed(path, 4096)  # read as a TF timeline until the last event
    trace = load_trace(path)
    same(trace, whole(path))
    assert trace.format == "kineto"
    # One of our track names makes it our export, which has no slice on that track.
    ours = write_doc(
        tmp_path, {"traceEvents": [*events, meta_event(90, "/job:j/task:0/gpu:0/stream:7")]}
    )
    with pytest.raises(NotStreamable):
        streamed(ours, 4096)
    with pytest.raises(TraceFormatError, match="tfprof trace has no GPU events"):
        load_trace(ours)


def test_files_without_gpu_events_or_events_keep_their_messages(tmp_path: Path) -> None:
    cpu_only = write_doc(tmp_path, {"traceEvents": [meta_event(1, "cpu"), x_event(1, 1, 2, "op")]})
    empty = write_doc(tmp_path, {"traceEvents": []}, "empty.json")
    for path, message in ((cpu_only, "no GPU events"), (empty, "traceEvents is empty")):
        with pytest.raises(Exception, match=message) as streamed_error:
            load_trace(path)
        with pytest.raises(Exception, match=message) as whole_error:
            whole(path)
        assert str(streamed_error.value) == str(whole_error.value)


@pytest.mark.parametrize("missing", ["msgspec", "numpy"])
def test_without_msgspec_or_numpy_the_records_are_the_same(
    missing: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = [whole(path) for path in real_traces()]
    monkeypatch.setitem(sys.modules, missing, None)  # import raises ImportError
    for path, trace in zip(real_traces(), expected, strict=True):
        same(load_trace(path), trace)


def test_kineto_host_side_first_then_gpu_is_streamed(tmp_path: Path) -> None:
    events = read_doc(shared_traces() / "kineto-hta" / "simple_add.json.gz")["traceEvents"]
    gpu = {"kernel", "gpu_memcpy", "gpu_memset"}
    host_first = [e for e in events if e.get("cat") not in gpu] + [
        e for e in events if e.get("cat") in gpu
    ]
    path = write_doc(tmp_path, {"traceEvents": host_first}, "host_first.json")
    same(streamed(path, 2048), whole(path))  # read as Kineto from its host side on
    host_only = write_doc(
        tmp_path, {"traceEvents": [e for e in events if e.get("cat") not in gpu]}, "host.json"
    )
    with pytest.raises(NotStreamable):
        streamed(host_only, 2048)  # no GPU category at all: not Kineto after all
    with pytest.raises(TraceFormatError) as streamed_error:
        load_trace(host_only)
    with pytest.raises(TraceFormatError) as whole_error:
        whole(host_only)
    assert str(streamed_error.value) == str(whole_error.value)
