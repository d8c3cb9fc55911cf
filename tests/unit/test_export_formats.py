"""Perfetto, XPlane and StepStats exports, read back with the classes of the packages
that define those formats (and, where installed, the tools that open them)."""

from __future__ import annotations

import gzip
import json
import logging
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.unit.perfetto_readback import big_timeline, perfetto_packets, perfetto_view, pftrace
from tests.unit.sample_timeline import T0, render, sample_timeline, slices
from tfprof.collector import export as export_mod
from tfprof.collector.export import UnknownFormatError, format_for, write_timeline
from tfprof.collector.jobdata import JobData
from tfprof.collector.merged.whole import build_timeline


def chrome_tracks(trace: dict[str, Any]) -> Counter[str]:
    """Slices per pseudo-device name in a Chrome export."""
    names = {
        e["pid"]: e["args"]["name"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["name"] == "process_name"
    }
    return Counter(names[e["pid"]] for e in slices(trace))


def test_perfetto_tracks_slices_args_and_counters_match_chrome() -> None:
    tl = sample_timeline()
    view = perfetto_view(perfetto_packets(tl))
    chrome = render(tl)
    assert Counter(s["track"] for s in view["slices"]) == chrome_tracks(chrome)
    assert view["ends"] == len(view["slices"]) == 8
    # every name interned once; the read's name 0, "" (no name), is no slice's
    assert set(view["names"].values()) == set(tl.names[1:])
    assert len(view["names"]) == len(tl.names) - 1
    by_key = {(e["name"], e["args"]["correlation"], e["ts"]): e for e in slices(chrome)}
    for s in view["slices"]:
        twin = by_key[(s["name"], s["args"]["correlation"], round(s["ts"] / 1000, 3))]
        assert s["cat"] == twin["cat"]
        expected = {k: v for k, v in twin["args"].items() if v is not None}
        assert s["args"] == expected
    kernel = next(s for s in view["slices"] if s["args"].get("correlation") == 11)
    assert kernel["args"]["grid"] == "(128, 2, 1)" and kernel["args"]["registers per thread"] == 40
    copy = next(s for s in view["slices"] if s["args"].get("correlation") == 13)
    assert copy["args"]["GB/s"] == 2.0 and copy["args"]["kind"] == "HtoD"
    cpu = "/job:train/task:0/cpu"
    # Named as viewers name the Chrome export's counters ("<event name> <arg key>")
    assert view["counters"][f"{cpu}:cpu percent"] == [12.5, 99.0]
    assert view["counters"][f"{cpu}:rss bytes"] == [1 << 30, 2 << 30]


def test_perfetto_clock_snapshot_and_sequence_flags() -> None:
    packets = perfetto_packets(sample_timeline())
    first = packets[0]
    assert first.sequence_flags == pftrace.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
    clocks = {c.clock_id: c.timestamp for c in first.clock_snapshot.clocks}
    assert clocks[pftrace.BUILTIN_CLOCK_REALTIME] == T0
    assert all(
        p.sequence_flags == pftrace.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE for p in packets[1:]
    )


def test_perfetto_is_written_in_bounded_chunks() -> None:
    from tfprof.collector.export.perfetto import PerfettoReporter

    tl = big_timeline(5000)
    writes: list[int] = []

    class Sink:
        def write(self, data: bytes | memoryview, /) -> None:
            writes.append(len(data))

    PerfettoReporter(tl, chunk_events=256).render(Sink())
    assert len(writes) > 5000 // 256  # one write per chunk, never the whole trace at once
    view = perfetto_view(perfetto_packets(tl, chunk_events=256))
    assert len(view["slices"]) == 5000
    assert min(s["ts"] for s in view["slices"]) == 0


def test_xplane_planes_lines_events_and_stats(tmp_path: Path) -> None:
    from tfprof.readers.tfprotos import xplane

    pb = xplane()
    target = write_timeline(sample_timeline(), tmp_path / "logdir", "xplane")
    assert target.parent.parent == tmp_path / "logdir" / "plugins" / "profile"
    assert target.name == "h1.xplane.pb"
    space = pb.XSpace.FromString(target.read_bytes())
    planes = {p.name: p for p in space.planes}
    gpu = planes["/device:GPU:0"]
    lines = {line.id: line for line in gpu.lines}
    assert lines[7].name == "Stream #7(Kernel)"
    assert lines[13].name == "Stream #13(MemcpyH2D,MemcpyP2P,Memset)"
    assert [len(lines[7].events), len(lines[13].events)] == [2, 4]
    stat_names = {m.id: m.name for m in gpu.stat_metadata.values()}
    first = lines[7].events[0]
    stats = {stat_names[s.metadata_id]: s for s in first.stats}
    # correlation 11 has no API call in the sample: left out, so XProf draws no
    # one-ended launch flow (tests/unit/test_host_side.py covers linked ones)
    assert "correlation_id" not in stats and stats["context_id"].uint64_value
    assert stat_names[stats["kernel_details"].ref_value].startswith("regs:40 static_shared:1024")
    assert gpu.event_metadata[first.metadata_id].name == 'gemm<"fp16">\\kernel'
    # relative times: the line starts at the session start, events are ps after it
    assert lines[7].timestamp_ns == 0 and first.duration_ps == 1_234_567_000
    assert lines[7].events[1].offset_ps == 1_500_000
    env = planes["Task Environment"]
    env_stats = {env.stat_metadata[s.metadata_id].name: s.uint64_value for s in env.stats}
    assert env_stats["profile_start_time"] == T0


def test_xprof_opens_our_xplane(tmp_path: Path) -> None:
    raw_to_tool_data = pytest.importorskip("xprof.convert.raw_to_tool_data")
    target = write_timeline(sample_timeline(), tmp_path / "logdir", "xplane")
    data, _ = raw_to_tool_data.xspace_to_tool_data([str(target)], "trace_viewer", {})
    trace = json.loads(data)
    names = Counter(e.get("name") for e in trace["traceEvents"] if e.get("ph") == "X")
    assert names['gemm<"fp16">\\kernel'] == 2 and names["MEMCPYHtoD"] == 1
    threads = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"}
    assert {"Stream #7(Kernel)", "Stream #13(MemcpyH2D,MemcpyP2P,Memset)"} <= threads
    data, _ = raw_to_tool_data.xspace_to_tool_data([str(target)], "kernel_stats", {})
    rows = json.loads(data)["rows"]
    kernels = {(r["c"][1]["v"], r["c"][4]["v"], r["c"][5]["v"]) for r in rows}
    assert kernels == {('gemm<"fp16">\\kernel', "256,1,1", "128,2,1"),
                       ('gemm<"fp16">\\kernel', "32,1,1", "1,1,1")}  # fmt: skip
    registers = {r["c"][4]["v"]: r["c"][2]["v"] for r in rows}
    assert registers["256,1,1"] == 40


@pytest.mark.tensorflow
def test_tensorflow_timeline_loads_our_stepstats(tmp_path: Path) -> None:
    timeline_mod = pytest.importorskip("tensorflow.python.client.timeline")
    from tensorflow.core.protobuf import config_pb2

    tl = sample_timeline()
    out = write_timeline(tl, tmp_path / "run.pb")
    run_metadata = config_pb2.RunMetadata.FromString(out.read_bytes())
    devices = [d.device for d in run_metadata.step_stats.dev_stats]
    assert devices == [t.name for t in tl.slices]
    assert "/job:train/task:0/gpu:0/stream:7" in devices
    assert "/job:train/task:0/gpu:0/memcpy" in devices
    trace = json.loads(
        timeline_mod.Timeline(run_metadata.step_stats).generate_chrome_trace_format()
    )
    got: Counter[str] = Counter()
    pids = {
        e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"
    }
    for e in trace["traceEvents"]:
        if e.get("ph") == "X":
            got[pids[e["pid"]].removesuffix(" Compute")] += 1
    assert got == chrome_tracks(render(tl))
    ops = {e["name"] for e in trace["traceEvents"] if e.get("ph") == "X"}
    assert 'gemm<"fp16">\\kernel' in ops and "MEMCPYHtoD" in ops
    text = write_timeline(tl, tmp_path / "run.pbtxt")
    from google.protobuf import text_format

    parsed = text_format.Parse(text.read_text(), config_pb2.RunMetadata())
    assert parsed == run_metadata


def test_format_choice_by_suffix_and_directory(tmp_path: Path) -> None:
    assert format_for("t.pftrace") == "perfetto"
    assert format_for("t.pbtxt") == "stepstats" and format_for("t.pb") == "stepstats"
    assert format_for("x/host.xplane.pb") == "xplane"
    assert format_for(tmp_path) == "xplane" and format_for("logs/") == "xplane"
    with pytest.raises(UnknownFormatError, match="a directory means xplane"):
        format_for("t.txt")


def test_large_chrome_json_warns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(export_mod, "CHROME_JSON_WARN_BYTES", 1000)
    with caplog.at_level(logging.WARNING, logger="tfprof.collector.export"):
        out = write_timeline(sample_timeline(), tmp_path / "t.json.gz")
    assert "--format perfetto" in caplog.text and ".pftrace" in caplog.text
    assert json.loads(gzip.decompress(out.read_bytes()))  # still written whole
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="tfprof.collector.export"):
        write_timeline(sample_timeline(), tmp_path / "t.pftrace")
    assert caplog.text == ""


def test_perfetto_keeps_touching_slices_of_different_kinds_in_time_order() -> None:
    # A memset ends exactly when the next kernel begins on the same stream: the end must
    # come first, or a timestamp sort would nest the kernel inside the memset.
    from tests.unit.merge_rows import kernel, memset, stream

    timeline = build_timeline(
        [JobData("j", "r", [stream([kernel(100, 50), memset(0, 100), kernel(150, 10)])])]
    )
    events = [
        (p.timestamp, p.track_event.type)
        for p in perfetto_packets(timeline)
        if p.HasField("track_event") and p.track_event.type in (1, 2)  # begin, end
    ]
    times = [t for t, _ in events]
    assert times == sorted(times)
    begin, end = 1, 2
    assert [k for _, k in events] == [begin, end, begin, end, begin, end]
