"""The host side on real recorded traces: readers, thread tracks, flows, attribution, XPlane."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.traces import shared_traces
from tfprof.collector.export import write_timeline
from tfprof.collector.merged.whole import build_timeline
from tfprof.collector.store.importer import jobs_from_files
from tfprof.collector.timeline.attribution import HOW_LAUNCH, attribute_ops, innermost_at
from tfprof.collector.timeline.flows import link_launches
from tfprof.core.records import RecordKind
from tfprof.core.tracks import TrackKey, TrackKind
from tfprof.readers import load_trace

_GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_sync")
KINETO = ["simple_add.json.gz", "event_sync_multi_stream.json.gz"]


def _raw(path: Path) -> list[dict[str, Any]]:
    data = path.read_bytes()
    doc = json.loads(gzip.decompress(data) if path.suffix == ".gz" else data)
    events: list[dict[str, Any]] = doc["traceEvents"]
    return events


def _kineto(name: str) -> Path:
    return shared_traces() / "kineto-hta" / name


def _columns(path: Path) -> tuple[dict[str, np.ndarray], list[str]]:
    trace = load_trace(path)
    return {c: np.asarray(v, dtype=np.int64) for c, v in trace.columns.items()}, trace.names


def test_thread_track_names_round_trip() -> None:
    key = TrackKey.for_thread("j", "0", 493459)
    assert key.format() == "/job:j/task:0/cpu/thread:493459"
    assert TrackKey.parse(key.format()) == key and key.is_host
    assert key.device_prefix == "/job:j/task:0/cpu"
    assert TrackKey.parse("/job:j/task:0/cpu").kind is TrackKind.CPU


@pytest.mark.parametrize("name", KINETO)
def test_kineto_host_events_become_api_and_marker_records(name: str) -> None:
    path = _kineto(name)
    raw = _raw(path)
    cols, names = _columns(path)
    api = np.flatnonzero(cols["kind"] == RecordKind.API)
    runtime = [e for e in raw if e.get("cat") == "cuda_runtime"]
    assert len(api) == len(runtime)
    assert Counter(names[i] for i in cols["name"][api]) == Counter(e["name"] for e in runtime)
    assert sorted(cols["correlation"][api].tolist()) == sorted(
        e["args"]["correlation"] for e in runtime
    )
    assert set(cols["category"][api].tolist()) == {1}  # runtime, not driver
    assert set(cols["thread"][api].tolist()) == {e["tid"] for e in runtime}
    ranges = [e for e in raw if e.get("cat") in ("cpu_op", "user_annotation")]
    markers = np.flatnonzero(cols["kind"] == RecordKind.MARKER)
    assert Counter((names[cols["category"][i]], cols["external_id"][i]) for i in markers) == (
        Counter((e["cat"], e["args"]["External id"]) for e in ranges)
    )


def test_kineto_flow_events_agree_with_correlation_links() -> None:
    path = _kineto("simple_add.json.gz")
    raw = _raw(path)
    starts = {e["id"] for e in raw if e.get("cat") == "ac2g" and e["ph"] == "s"}
    finishes = {e["id"] for e in raw if e.get("cat") == "ac2g" and e["ph"] == "f"}
    stats = load_trace(path).flow_stats
    assert stats["flows"] == len(starts & finishes) == 139
    assert stats["flows_agreeing"] == 139 and stats["flows_disagreeing"] == 0
    assert stats["flow_starts_without_finish"] == len(starts - finishes)
    assert stats["flow_finishes_without_start"] == len(finishes - starts)


def test_tf_timeline_host_ops_and_dataflow() -> None:
    path = shared_traces() / "tf-timeline-ikhlestov" / "GPU_timeline_02_step_0.json"
    raw = _raw(path)
    executor = ("/task:0/cpu:0 Compute", "/task:0/gpu:0 Compute")  # not the GPU tracer's
    pids = {
        e["pid"]
        for e in raw
        if e.get("name") == "process_name" and e["args"]["name"].endswith(executor)
    }
    ops = [e for e in raw if e.get("ph") == "X" and e["pid"] in pids]
    trace = load_trace(path)
    kind = list(trace.column("kind"))
    assert kind.count(RecordKind.MARKER) == len(ops) == 81
    names = {trace.names[n] for n, k in zip(trace.column("name"), kind, strict=True) if k == 6}
    assert "layer_1/fully_connected/MatMul:MatMul" in names
    flows = Counter(e["ph"] for e in raw if e.get("cat") == "DataFlow")
    assert trace.flow_stats["dataflow_flows"] == flows["s"] == flows["t"]


@pytest.mark.parametrize("name", KINETO)
def test_every_gpu_record_with_a_runtime_partner_has_exactly_one_flow(name: str) -> None:
    path = _kineto(name)
    raw = _raw(path)
    runtime = Counter(e["args"]["correlation"] for e in raw if e.get("cat") == "cuda_runtime")
    gpu = [e for e in raw if e.get("cat") in _GPU_CATS and e.get("ph") == "X"]
    partnered = [e for e in gpu if runtime[e["args"].get("correlation", 0)] == 1]
    timeline = build_timeline(jobs_from_files([path], as_steps=False))
    flows = timeline.flows
    assert len(flows) == len(partnered) > 0
    ends = Counter(zip(flows.to_track.tolist(), flows.to_slice.tolist(), strict=True))
    assert max(ends.values()) == 1  # one flow per GPU record
    for n in range(len(flows)):
        src = timeline.slices[int(flows.from_track[n])]
        dst = timeline.slices[int(flows.to_track[n])]
        assert src.key.kind is TrackKind.THREAD and dst.key.kind is TrackKind.STREAM
        i, j = int(flows.from_slice[n]), int(flows.to_slice[n])
        assert src.kind[i] == RecordKind.API
        corr = src.column("correlation", np.array([i]))[0]
        assert corr == dst.column("correlation", np.array([j]))[0] == flows.correlation[n]
        assert src.start_ns[i] <= dst.start_ns[j]  # the launch comes first
    stats = timeline.metadata["host_side"]["flows"]
    assert stats["linked"] == len(partnered)
    assert stats["missing_api"] == len(gpu) - len(partnered)


def test_api_calls_and_ranges_sit_on_host_thread_tracks() -> None:
    path = _kineto("simple_add.json.gz")
    timeline = build_timeline(jobs_from_files([path], as_steps=False))
    threads = [t for t in timeline.slices if t.key.kind is TrackKind.THREAD]
    assert [t.name for t in threads] == ["/job:simple_add/task:0/cpu/thread:493459"]
    host = [p for p in timeline.processes if p.pid == threads[0].pid]
    assert host[0].name == "/job:simple_add/task:0/cpu"
    assert Counter(threads[0].kind.tolist()) == {RecordKind.API: 331, RecordKind.MARKER: 367}
    gpu_kinds = {k for t in timeline.slices if not t.key.is_host for k in t.kind.tolist()}
    assert gpu_kinds <= {1, 2, 3, 4}


def test_attribution_by_launch_agrees_with_kineto_external_ids() -> None:
    cols, names = _columns(_kineto("event_sync_multi_stream.json.gz"))
    result = attribute_ops(cols, names)
    by_launch = result.how == HOW_LAUNCH
    assert by_launch.sum() > 0
    gpu, marker = result.gpu[by_launch], result.marker[by_launch]
    assert (cols["external_id"][gpu] == cols["external_id"][marker]).all()
    assert {names[i] for i in cols["name"][marker]} == {"aten::mm"}


def test_tf_kernels_are_attributed_to_their_node_op() -> None:
    path = shared_traces() / "tf-timeline-ikhlestov" / "GPU_timeline_03_merged_5_runs.json"
    cols, names = _columns(path)
    result = attribute_ops(cols, names)
    ok = result.marker >= 0
    assert ok.sum() >= 190  # every kernel; copies named by edge have no op range
    for g, m in zip(result.gpu[ok].tolist(), result.marker[ok].tolist(), strict=True):
        node = names[cols["name"][g]]
        assert names[cols["name"][m]].rpartition(":")[0] == node
        assert cols["start_ns"][m] <= cols["start_ns"][g]


def test_innermost_range_walks_out_of_closed_ranges() -> None:
    # thread 5: [0, 100] holds [10, 20] and [30, 90], which holds [40, 50]
    thread = np.array([5, 5, 5, 5, 6])
    start = np.array([0, 10, 30, 40, 0])
    end = np.array([100, 20, 90, 50, 1000])
    at = np.array([15, 25, 45, 60, 95, 200, 15])
    on = np.array([5, 5, 5, 5, 5, 5, 7])
    assert innermost_at(thread, start, end, on, at).tolist() == [1, 0, 3, 2, 0, -1, -1]


def test_links_count_unknown_missing_and_ambiguous() -> None:
    api, k = RecordKind.API, RecordKind.KERNEL
    kind = np.array([api, api, api, k, k, k, k, k])
    corr = np.array([1, 2, 2, 1, 2, 3, 0, 1])
    links = link_launches(kind, corr)
    assert links.gpu.tolist() == [3, 7] and links.api.tolist() == [0, 0]
    assert (links.unknown, links.missing, links.ambiguous) == (1, 1, 1)


def test_kineto_memory_instants_become_a_counter_and_a_peak(tmp_path: Path) -> None:
    def memory(ts: int, nbytes: int, device_type: int = 1) -> dict[str, Any]:
        args = {"Device Type": device_type, "Device Id": 0, "Addr": 4096 + ts, "Bytes": nbytes,
                "Total Allocated": 0, "Total Reserved": 0}  # fmt: skip
        return {"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 2, "ts": ts, "args": args}

    kernel = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 5, "dur": 1,
              "args": {"device": 0, "stream": 7, "correlation": 0}}  # fmt: skip
    events = [kernel, memory(1, 1000), memory(2, 500), memory(3, 64, 0), memory(4, -1000),
              memory(6, 2000)]  # fmt: skip
    path = tmp_path / "mem.json"
    path.write_text(json.dumps({"traceEvents": events}))
    trace = load_trace(path)
    kinds = list(trace.column("kind"))
    assert kinds.count(RecordKind.MEMORY) == 4  # the host (Device Type 0) one is not read
    timeline = build_timeline(jobs_from_files([path], as_steps=False))
    (counter,) = [c for c in timeline.counters if c.name == "gpu:0 allocated_bytes"]
    assert counter.values.tolist() == [1000, 1500, 500, 2500]
    assert timeline.metadata["host_side"]["memory_peak_bytes"] == {"mem": {"imported/gpu:0": 2500}}


def _xprof(path: Path, tmp_path: Path, tool: str) -> Any:
    raw_to_tool_data = pytest.importorskip("xprof.convert.raw_to_tool_data")
    timeline = build_timeline(jobs_from_files([path], as_steps=False))
    target = write_timeline(timeline, tmp_path / "logdir", "xplane")
    data, _ = raw_to_tool_data.xspace_to_tool_data([str(target)], tool, {})
    return json.loads(data)


def test_xprof_op_tools_show_tf_ops_of_a_replayed_timeline(tmp_path: Path) -> None:
    path = shared_traces() / "tf-timeline-ikhlestov" / "GPU_timeline_02_step_0.json"
    stats = _xprof(path, tmp_path, "framework_op_stats")
    ops = {(r["c"][2]["v"], r["c"][3]["v"]) for r in stats[0]["rows"]}
    assert ("MatMul", "layer_1/fully_connected/MatMul") in ops
    assert len([op for op in ops if op[0] != "IDLE"]) > 10
    profile = _xprof(path, tmp_path / "p", "op_profile")
    children = profile["byProgram"]["children"]
    busy = [c for c in children if c["name"] != "IDLE"]
    assert busy and any(g["name"] == "MatMul" for c in busy for g in c["children"])
    kernels = _xprof(path, tmp_path / "k", "kernel_stats")
    op_names = {r["c"][1]["v"]: r["c"][9]["v"] for r in kernels["rows"]}
    assert op_names["layer_1/fully_connected/MatMul"] == "layer_1/fully_connected/MatMul"


def test_xprof_trace_viewer_draws_one_flow_per_launch(tmp_path: Path) -> None:
    path = _kineto("simple_add.json.gz")
    trace = _xprof(path, tmp_path, "trace_viewer@")  # the tool the browser asks for
    ends = Counter(
        ("in" if e.get("flow_in") else "out", e["bind_id"])
        for e in trace["traceEvents"]
        if "bind_id" in e
    )
    ins = {b for d, b in ends if d == "in"}
    outs = {b for d, b in ends if d == "out"}
    assert len(ins) == len(outs) == 139 and ins == outs  # every arrow has both ends
    assert max(ends.values()) == 1
