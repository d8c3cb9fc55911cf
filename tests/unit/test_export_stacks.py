"""Python stacks in the timeline exports: a Kineto trace recorded with_stack=True
(TraceLens BERT) exported to Chrome JSON (``stackFrames`` and ``"ph": "P"`` samples)
and to Perfetto (callstack samples), read back from the files."""

from __future__ import annotations

import json
from pathlib import Path

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pftrace

from tests.unit.stack_traces import BERT
from tfprof.collector.cli import main as collector


def test_chrome_json_carries_stack_frames_and_samples(tmp_path: Path) -> None:
    out = tmp_path / "bert.json"
    assert collector(["export", str(BERT), "-o", str(out)]) == 0
    doc = json.loads(out.read_text())
    frames = doc["stackFrames"]
    samples = [e for e in doc["traceEvents"] if e["ph"] == "P"]
    assert len(samples) == 61 and {e["tid"] for e in samples} == {19392}
    (pid,) = {e["pid"] for e in samples}
    (title,) = [e["args"]["name"] for e in doc["traceEvents"]
                if e["ph"] == "M" and e["pid"] == pid]  # fmt: skip
    assert "/task:0 Python stacks" in title
    for sample in samples:  # every stack resolves, up to the process's outermost frame
        chain, at = [], sample["sf"]
        while at is not None:
            chain.append(frames[at]["name"])
            at = frames[at].get("parent")
        assert chain[-1] == "<string>:1:<module>"
    leaves = [frames[e["sf"]]["name"] for e in samples]
    assert leaves.count("<built-in function linear>") == 26
    timeline = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert max(e["ts"] for e in samples) <= max(e["ts"] + e["dur"] for e in timeline)


def test_perfetto_appends_callstack_samples(tmp_path: Path) -> None:
    out = tmp_path / "bert.pftrace"
    assert collector(["export", str(BERT), "-o", str(out)]) == 0
    trace = pftrace.Trace.FromString(out.read_bytes())
    profile = [p for p in trace.packet if p.HasField("streaming_profile_packet")]
    (thread,) = [p.thread_descriptor for p in trace.packet if p.HasField("thread_descriptor")]
    assert thread.tid == 19392 and thread.thread_name == "thread 19392"
    stacks = [i for p in profile for i in p.streaming_profile_packet.callstack_iid]
    assert len(stacks) == 61
    interned = [p.interned_data for p in trace.packet if p.HasField("interned_data")]
    known = {c.iid for d in interned for c in d.callstacks}
    assert set(stacks) <= known
