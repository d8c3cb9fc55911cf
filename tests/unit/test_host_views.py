"""The host-side summary views (op, scope, api, launch, memory) on real traces.

The ``op`` and ``api`` totals are checked against an independent computation from the
raw JSON file (json.load and plain Python: a kernel belongs to the innermost cpu_op /
user_annotation open on its launching thread when its cuda_runtime call started, else
to the range with its External id); the TF timeline replays show TF op names. Every
view is read as ``summary FILE`` reads it: through the read engine.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.kineto_memory import memory_trace
from tests.traces import shared_traces
from tfprof.collector.analysis.api import NO_API
from tfprof.collector.analysis.filters import Filters
from tfprof.collector.analysis.memory_view import NO_MEMORY
from tfprof.collector.analysis.ops import NO_RANGES
from tfprof.collector.analysis.scopes import scope_path
from tfprof.collector.analysis.view_render import ViewReport
from tfprof.collector.analysis.view_table import read_view_report
from tfprof.collector.cli import main
from tfprof.collector.errors import AnalysisError
from tfprof.collector.read.lake_catalog import catalog
from tfprof.collector.read.launch_queues import LaunchQueues
from tfprof.collector.read.trace_files import read_trace_files
from tfprof.collector.timeline.prepare import TimeWindow

KINETO = ["simple_add.json.gz", "event_sync_multi_stream.json.gz"]
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
RANGE_CATS = ("cpu_op", "user_annotation")
API_CATS = ("cuda_runtime", "cuda_driver")


def _events(path: Path) -> list[dict[str, Any]]:
    data = path.read_bytes()
    doc = json.loads(gzip.decompress(data) if path.suffix == ".gz" else data)
    return [e for e in doc["traceEvents"] if e.get("ph") == "X"]


def _kineto(name: str) -> Path:
    return shared_traces() / "kineto-hta" / name


def _report(
    view: str, path: Path, filters: Filters | None = None, since: int | None = None
) -> ViewReport:
    """``summary FILE --view VIEW``'s report: the file imported into a lake in memory."""
    cat = catalog(read_trace_files([path]).jobs, TimeWindow(since, None))
    return read_view_report(view, cat, filters)


def _near(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-3 + 1e-6 * abs(b)


def _independent_ops(events: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per op name: ranges, GPU us, kernels, launch us, computed from the file alone."""
    calls: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        if e.get("cat") in API_CATS and e["args"].get("correlation"):
            calls[e["args"]["correlation"]].append(e)
    ranges = [e for e in events if e.get("cat") in RANGE_CATS]
    by_external = Counter(r["args"].get("External id") for r in ranges)
    ops: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for r in ranges:
        ops[r["name"]]["count"] += 1
    launched: set[tuple[str, int]] = set()
    for g in (e for e in events if e.get("cat") in GPU_CATS):
        corr = g["args"].get("correlation", 0)
        call = calls[corr][0] if corr and len(calls[corr]) == 1 else None
        owner = None
        if call is not None:
            open_ = [r for r in ranges if r["tid"] == call["tid"]
                     and r["ts"] <= call["ts"] <= r["ts"] + r["dur"]]  # fmt: skip
            if open_:
                owner = max(open_, key=lambda r: (r["ts"], -r["dur"]))
        ext = g["args"].get("External id")
        if owner is None and ext and by_external[ext] == 1:
            owner = next(r for r in ranges if r["args"].get("External id") == ext)
        if owner is None:
            continue
        op = ops[owner["name"]]
        op["gpu_us"] += g["dur"]
        op["kernels"] += g["cat"] == "kernel"
        if call is not None and (owner["name"], corr) not in launched:
            launched.add((owner["name"], corr))
            op["launch_us"] += call["dur"]
    return ops


@pytest.mark.parametrize("name", KINETO)
def test_op_view_equals_an_independent_computation_from_the_file(name: str) -> None:
    path = _kineto(name)
    expected = _independent_ops(_events(path))
    report = _report("op", path)
    rows = {r.op: r for r in report.rows}
    assert set(rows) == set(expected)
    for op, want in expected.items():
        got = rows[op]
        assert got.count == want["count"], op
        assert got.kernels == want["kernels"], op
        assert _near(got.gpu_us, want["gpu_us"]), (op, got.gpu_us, want["gpu_us"])
        assert _near(got.launch_us, want["launch_us"]), (op, got.launch_us, want["launch_us"])
    attributed = sum(w["gpu_us"] for w in expected.values())
    assert attributed > 0
    everything = sum(e["dur"] for e in _events(path) if e.get("cat") in GPU_CATS)
    lost = report.notes
    assert (attributed < everything) == any("ran for no op" in n for n in lost)


@pytest.mark.parametrize("name", KINETO)
def test_api_view_equals_an_independent_computation_from_the_file(name: str) -> None:
    path = _kineto(name)
    calls: dict[str, list[float]] = defaultdict(list)
    for e in _events(path):
        if e.get("cat") in API_CATS:
            calls[e["name"]].append(float(e["dur"]))
    rows = {r.name: r for r in _report("api", path).rows}
    assert set(rows) == set(calls)
    for api, durations in calls.items():
        row = rows[api]
        assert row.calls == len(durations) and row.errors == 0
        assert _near(row.total_us, sum(durations)), api
        assert _near(row.min_us, min(durations)) and _near(row.max_us, max(durations))
        assert _near(row.median_us, float(np.median(durations))), api
        assert row.api == "runtime"
    assert abs(sum(r.time_pct for r in rows.values()) - 100.0) < 0.01 * len(rows)


def test_tf_timeline_replay_shows_tf_op_names_and_their_scopes() -> None:
    path = shared_traces() / "tf-timeline-ikhlestov" / "GPU_timeline_02_step_1.json"
    events = _events(path)
    pids = {}
    doc = json.loads(path.read_text())
    for e in doc["traceEvents"]:
        if e.get("ph") == "M" and e["name"] == "process_name":
            pids[e["pid"]] = e["args"]["name"]
    tf_ops = Counter(
        f"{e['args']['name']}:{e['args']['op']}"
        for e in events
        if "/stream:" not in pids[e["pid"]] and "/memcpy" not in pids[e["pid"]]
    )
    ops = _report("op", path).rows
    rows = {r.op: r for r in ops}
    assert {op: r.count for op, r in rows.items()} == dict(tf_ops)
    assert rows["layer_1/fully_connected/MatMul:MatMul"].kernels == 1
    assert rows["layer_1/fully_connected/MatMul:MatMul"].gpu_us > 0

    scopes = _report("scope", path).rows
    top = {r.scope: r for r in scopes if r.depth == 1}
    assert "gradients" in top and "layer_1" in top
    # A scope's total is its own ops plus everything below it.
    total = sum(r.gpu_us for r in ops)
    assert _near(sum(r.total_us for r in top.values()), total)
    shallow = _report("scope", path, Filters(max_depth=1)).rows
    assert {r.scope for r in shallow} == set(top)


def test_scope_paths_split_tf_nodes_and_nvtx_paths() -> None:
    assert scope_path("gradients/dense/MatMul_grad/MatMul:MatMul", tf_op=True) == (
        "gradients", "dense", "MatMul_grad", "MatMul",
    )  # fmt: skip
    assert scope_path("aten::addmm", tf_op=False) == ("aten::addmm",)
    assert scope_path("train/forward/", tf_op=False) == ("train", "forward")


def test_max_depth_is_refused_by_views_that_are_not_trees() -> None:
    path = _kineto("simple_add.json.gz")
    with pytest.raises(AnalysisError, match="--max-depth"):
        _report("op", path, Filters(max_depth=2))
    with pytest.raises(AnalysisError, match="no time field"):
        _report("memory", path, Filters(min_micros=1))


def test_views_with_nothing_to_show_say_why() -> None:
    tf = shared_traces() / "tf-timeline-ikhlestov" / "GPU_timeline_01.json"
    assert NO_API in _report("api", tf).notes
    assert any(NO_API in n for n in _report("launch", tf).notes)
    assert _report("api", tf).rows == []
    kineto = _kineto("simple_add.json.gz")
    assert NO_MEMORY in _report("memory", kineto).notes
    assert NO_RANGES not in _report("op", kineto).notes


def test_queue_depth_counts_launched_not_started_work_per_stream() -> None:
    # stream 7: launches at 0, 1, 2 start at 10, 11, 12 -> 0, 1, 2 waiting; the launch at
    # 20 finds all started. Stream 8 has its own queue. Asked in one chunk, then in two
    # (the state the read engine carries between chunks).
    code = np.array([7, 7, 7, 7, 8], dtype=np.int64)  # one int64 per (group, device, stream)
    launched = np.array([0, 1, 2, 20, 1], dtype=np.int64)
    started = np.array([10, 11, 12, 25, 3], dtype=np.int64)
    assert LaunchQueues().depth(code, launched, started).tolist() == [0, 1, 2, 0, 0]
    queues = LaunchQueues()
    first = queues.depth(code[:2], launched[:2], started[:2]).tolist()
    assert first + queues.depth(code[2:], launched[2:], started[2:]).tolist() == [0, 1, 2, 0, 0]


def test_memory_view_peak_capacity_timeline_and_window_start(tmp_path: Path) -> None:
    path = memory_trace(tmp_path, capacity=5000)
    whole = _report("memory", path)
    (row,) = whole.rows
    assert (row.peak_bytes, row.capacity_bytes, row.peak_pct) == (4000, 5000, 80.0)
    assert (row.allocations, row.releases, row.start_bytes, row.end_bytes) == (2, 2, 0, 0)
    assert row.peak_offset_s == pytest.approx(20e-6)
    assert [p.bytes for p in row.timeline] == [0, 1000, 4000, 3000, 3000, 0, 0, 0]
    # From +25 us on, the 4000 bytes allocated before the window are still counted.
    (late,) = _report("memory", path, since=whole.start_ns + 25_000).rows
    assert (late.start_bytes, late.peak_bytes, late.end_bytes) == (4000, 4000, 0)


def test_summary_command_prints_host_views_as_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _kineto("simple_add.json.gz")
    for view in ("op", "scope", "api", "launch", "memory"):
        assert main(["summary", str(path), "--view", view, "--format", "json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["view"] == view and doc["fields"]
    assert main(["summary", str(path), "--view", "op", "--format", "json", "--top", "1"]) == 0
    (top,) = json.loads(capsys.readouterr().out)["rows"]
    assert top["op"] == "aten::copy_" and top["gpu_us"] > 0
    assert main(["summary", str(path), "--view", "op", "--max-depth", "1"]) == 2
    assert "--max-depth" in capsys.readouterr().err
