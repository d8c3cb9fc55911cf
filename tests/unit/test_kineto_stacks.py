"""Python stacks of real Kineto traces (``with_stack=True``, AMD-AGI/TraceLens): read as
launch captures (readers/kineto_stacks.py), replayed with their records (replay:), and
stored by ``import`` in the lake's ``stacks`` and ``stack_samples`` tables."""

from __future__ import annotations

import gzip
import json
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.unit.replay_sink import FakeSink
from tests.unit.stack_outlet import Outlet
from tfprof.agent.inprocess.sources.replay import ReplaySource
from tfprof.agent.inprocess.stacks.code_capture import CodeCapture
from tfprof.collector.cli import main as collector
from tfprof.core.code_stacks import GRADIENT_FUNCTION, StackKind
from tfprof.core.records import RecordKind
from tfprof.readers import RecordedTrace, load_trace

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces" / "tracelens"
BERT = TRACES / "h100__gaunernst_bert-small-uncased__1016001.json.gz"
QWEN = TRACES / "h100__Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
NORM = TRACES / "perf_model__normalization__normalization_layer_test.json.gz"


def raw_events(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path) as f:
        events: list[dict[str, Any]] = json.load(f)["traceEvents"]
    return events


def stack_of(trace: RecordedTrace, node: int) -> list[tuple[str, int, str]]:
    assert trace.stacks is not None
    st, names = trace.stacks, trace.names
    out = []
    while node:
        parent, frame = st.nodes["parent"][node - 1], st.nodes["frame"][node - 1]
        f = st.frames
        out.append((names[f["file"][frame - 1]], f["line"][frame - 1],
                    names[f["function"][frame - 1]]))  # fmt: skip
        node = parent
    return out[::-1]


def launched(trace: RecordedTrace) -> dict[int, int]:
    """correlation -> kind of the GPU work that carries it."""
    return {
        c: k
        for k, c in zip(trace.column("kind"), trace.column("correlation"), strict=True)
        if k in (RecordKind.KERNEL, RecordKind.MEMCPY, RecordKind.MEMSET) and c
    }


def test_every_launch_with_a_python_caller_gets_its_innermost_call() -> None:
    trace = load_trace(BERT)
    st = trace.stacks
    assert st is not None
    gpu = launched(trace)
    samples = list(zip(st.samples["correlation"], st.samples["stack"], st.samples["thread"],
                       st.samples["kind"], strict=True))  # fmt: skip
    # 60 kernels and a copy, all launched inside the profiled window from Python
    assert len(gpu) == 61 and {c for c, *_ in samples} == set(gpu)
    assert {k for *_, k in samples} == {StackKind.LAUNCH}
    # a capture's stack is the python_function chain around the launch in the file
    events = raw_events(BERT)
    calls = [e for e in events if e.get("cat") == "python_function"]
    by_id = {e["args"]["Python id"]: e for e in calls}
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver")}  # fmt: skip
    for corr, node, thread, _ in samples:
        launch = launches[corr]
        assert thread == launch["tid"]
        around = [e for e in calls if e["tid"] == launch["tid"]
                  and e["ts"] <= launch["ts"] <= e["ts"] + e["dur"]]  # fmt: skip
        leaf: dict[str, Any] | None = min(around, key=lambda e: e["dur"])
        chain = []
        while leaf is not None:
            chain.append(leaf["name"])
            parent = leaf["args"]["Python parent id"]
            leaf = by_id.get(parent) if parent is not None else None
        expected = [f"{f}({line}): {fn}" if f else fn for f, line, fn in stack_of(trace, node)]
        assert expected == chain[::-1]
    assert len(st) == 61


def test_launch_times_are_the_records_times() -> None:
    trace = load_trace(BERT)
    st = trace.stacks
    assert st is not None
    columns = (trace.column("kind"), trace.column("correlation"), trace.column("start_ns"))
    api = {c: s for k, c, s in zip(*columns, strict=True) if k == RecordKind.API}
    assert all(api[c] == t for c, t in zip(st.samples["correlation"], st.samples["time_ns"],
                                           strict=True))  # fmt: skip


def test_work_launched_before_the_window_has_no_capture() -> None:
    trace = load_trace(QWEN)
    assert trace.stacks is not None
    gpu = launched(trace)
    api = {c for k, c in zip(trace.column("kind"), trace.column("correlation"), strict=True)
           if k == RecordKind.API}  # fmt: skip
    assert len(gpu) == 1465 + 242 and len(gpu.keys() & api) == 1198
    assert set(trace.stacks.samples["correlation"]) == gpu.keys() & api


def test_backward_launches_get_the_forward_ops_stack_and_a_gradient_frame() -> None:
    trace = load_trace(NORM)
    st = trace.stacks
    assert st is not None
    threads = Counter(st.samples["thread"])
    assert len(threads) == 2  # the main thread and autograd's
    leaves = Counter(stack_of(trace, n)[-1][2] for n in st.samples["stack"])
    assert leaves[GRADIENT_FUNCTION] == 70  # of the 88 launches on autograd's thread
    modules: Counter[str] = Counter()
    for node in st.samples["stack"]:
        stack = stack_of(trace, node)
        if stack[-1][2] == GRADIENT_FUNCTION:
            # the forward op's Python stack: the script's code, then the module it ran
            files = [file for file, _, _ in stack]
            assert files[:3] == ["test_perf_model.py"] * 3
            modules[stack[3][2]] += 1
    assert modules == {"nn.Module: Net_0": 64, "nn.Module: MSELoss_0": 6}


def test_traces_without_python_calls_have_no_stacks() -> None:
    shipped = TRACES.parent / "kineto-hta" / "simple_add.json.gz"
    assert load_trace(shipped).stacks is None


def replay(path: Path, repeat: int, speed: float | None = None) -> tuple[FakeSink, Outlet]:
    outlet = Outlet()
    capture = CodeCapture(outlet, "sample", 100, 8)

    class Sink(FakeSink):
        def stack_sink(self) -> CodeCapture:  # type: ignore[override]
            return capture

    sink = Sink()
    source = ReplaySource(str(path), speed=speed, repeat=repeat)
    source.start(sink)
    source.stop(time.monotonic() + 60)
    capture.flush()
    return sink, outlet


@pytest.mark.parametrize("speed", [None, 50.0])
def test_replay_moves_each_loops_captures_with_its_records(speed: float | None) -> None:
    sink, outlet = replay(BERT, repeat=3, speed=speed)
    rows = sink.rows()
    api = {r["correlation"]: r["start_ns"] for r in rows if r["kind"] == RecordKind.API}
    kernels = {r["correlation"] for r in rows if r["kind"] == RecordKind.KERNEL}
    got = [(s["correlation"], s["time_ns"]) for s in outlet.samples]
    assert len(got) == 3 * 61 and len({c for c, _ in got}) == 3 * 61
    assert all(api[c] == t for c, t in got)  # same correlation, same time as its call
    assert len(kernels & {c for c, _ in got}) == 3 * 60
    leaves = Counter(outlet.functions(s["stack"])[-1] for s in outlet.samples)
    assert leaves["<built-in function linear>"] == 3 * 26


def test_replay_sends_only_the_captures_inside_a_window() -> None:
    outlet = Outlet()
    capture = CodeCapture(outlet, "sample", 100, 8)

    class Sink(FakeSink):
        def stack_sink(self) -> CodeCapture:  # type: ignore[override]
            return capture

    sink = Sink()
    source = ReplaySource(str(BERT), speed=None, repeat=2)
    source.start(sink, capturing=False)  # no window ever opens
    source.stop(time.monotonic() + 60)
    capture.flush()
    assert sink.rows() == [] and outlet.samples == []


def test_import_stores_the_stacks_in_the_lake(tmp_path: Path, capsys: Any) -> None:
    data = tmp_path / "data"
    assert collector(["import", "--data-dir", str(data), "--job", "bert", str(BERT)]) == 0
    capsys.readouterr()
    query = (
        "SELECT s.correlation, st.file, st.line, st.function, st.depth "
        "FROM stack_samples s JOIN stacks st USING (stream_id, stack_id) ORDER BY 1"
    )
    assert collector(["sql", "--data-dir", str(data), "--format", "json", query]) == 0
    rows = json.loads(capsys.readouterr().out)
    trace = load_trace(BERT)
    assert trace.stacks is not None
    expected = {}
    for corr, node in zip(trace.stacks.samples["correlation"], trace.stacks.samples["stack"],
                          strict=True):  # fmt: skip
        stack = stack_of(trace, node)
        expected[corr] = (*stack[-1], len(stack))
    assert {r["correlation"]: (r["file"], r["line"], r["function"], r["depth"]) for r in rows} \
        == expected  # fmt: skip
    # the launches of the model's own code: transformers' BERT and the harness script
    query = ("SELECT count(DISTINCT s.correlation) AS n FROM stack_samples s, stacks st "
             "WHERE st.file LIKE '%modeling_bert.py'")  # fmt: skip
    assert collector(["sql", "--data-dir", str(data), "--format", "json", query]) == 0
    assert json.loads(capsys.readouterr().out)[0]["n"] > 0


def test_concurrent_samplers_and_replay_share_one_id_space() -> None:
    # A live sampler and a replay in one process: every sample's stack resolves.
    outlet = Outlet()
    capture = CodeCapture(outlet, "sample", 500, 8)

    class Sink(FakeSink):
        def stack_sink(self) -> CodeCapture:  # type: ignore[override]
            return capture

    stop = threading.Event()
    busy = threading.Thread(target=stop.wait)
    busy.start()
    capture.start(True)
    sink = Sink()
    source = ReplaySource(str(QWEN), speed=None, repeat=2)
    source.start(sink)
    source.stop(time.monotonic() + 60)
    time.sleep(0.2)
    capture.stop(1.0)
    stop.set()
    busy.join()
    kinds = Counter(s["kind"] for s in outlet.samples)
    assert kinds[StackKind.LAUNCH] == 2 * 1198 and kinds[StackKind.SAMPLE] > 0
    assert all(outlet.stack(s["stack"]) for s in outlet.samples)
