"""The replay source against a recording fake sink: what it replays, and when (pacing,
stopping and failing sinks: test_replay_stop.py)."""

from __future__ import annotations

import gzip
import itertools
import socket
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.traces import needs_traces
from tfprof.agent.inprocess.sources import replay_plan
from tfprof.agent.inprocess.sources.replay import ReplaySource
from tfprof.agent.inprocess.sources.replay_plan import LOOP_GAP_NS
from tfprof.readers import load_trace

from .replay_sink import kineto_kernels, replay_all, row_key, trace_file, trace_keys


@needs_traces
@pytest.mark.parametrize(
    "rel",
    ["tf-timeline-ikhlestov/GPU_timeline_03_merged_5_runs.json", "kineto-hta/simple_add.json.gz"],
)
def test_max_speed_emits_every_record_once(rel: str) -> None:
    path = trace_file(rel)
    trace = load_trace(path)
    sink, before, after = replay_all(path)
    rows = sink.rows()
    t0 = min(r["start_ns"] for r in rows)
    assert before <= t0 <= after  # anchored at host time when the replay started
    assert Counter(row_key(r, sink, t0) for r in rows) == trace_keys(trace)
    assert sink.warnings == []
    assert len(sink.devices) == 1
    host = socket.gethostname()
    for info in sink.devices[0]:
        assert info["uuid"] == f"GPU-replay-{host}-{info['ordinal']}"
    expected_name = "NVIDIA A100-PG509-200" if "kineto" in rel else "replayed GPU"
    assert [d["name"] for d in sink.devices[0]] == [expected_name]


@needs_traces
def test_repeat_shifts_loops_forward_without_overlap() -> None:
    path = trace_file("kineto-hta/event_sync_multi_stream.json.gz")
    trace = load_trace(path)
    sink, _, _ = replay_all(path, speed=1e6, repeat=3)  # a finite speed: exact timing
    rows = sink.rows()
    assert len(rows) == 3 * len(trace)
    t0 = min(r["start_ns"] for r in rows)
    period = trace.span_ns + LOOP_GAP_NS
    loops: list[list[dict[str, int]]] = [[], [], []]
    for r in rows:
        loops[(r["start_ns"] - t0) // period].append(r)
    for k, loop in enumerate(loops):
        keys = Counter(row_key(r, sink, t0) for r in loop)
        assert keys == trace_keys(trace, shift=k * period)
    for earlier, later in itertools.pairwise(loops):
        assert max(r["start_ns"] + r["duration_ns"] for r in earlier) < min(
            r["start_ns"] for r in later
        )
    # an API call and what it launched share one id; GPU records' ids stay unique per loop
    gpu = (1, 2, 3, 4)
    corr = [r["correlation"] for r in rows if r["correlation"] and r["kind"] in gpu]
    recorded = [
        c
        for c, k in zip(trace.column("correlation"), trace.column("kind"), strict=True)
        if c and k in gpu
    ]
    assert len(set(corr)) == len(corr) == 3 * len(recorded)
    ids = [{r["correlation"] for r in loop if r["correlation"]} for loop in loops]
    assert not (ids[0] & ids[1]) and not (ids[1] & ids[2]) and not (ids[0] & ids[2])


@needs_traces
@pytest.mark.parametrize("use_numpy", [True, False])
def test_many_loops_of_a_short_trace(monkeypatch: pytest.MonkeyPatch, use_numpy: bool) -> None:
    # 98 records tile 83 loops per batch; 1000 loops end on a partial block.
    if not use_numpy:
        monkeypatch.setattr(replay_plan, "_numpy", lambda: None)
    path = trace_file("kineto-hta/simple_add.json.gz")
    trace = load_trace(path)
    sink, _, _ = replay_all(path, speed=1e6, repeat=1000)  # 16.5 ms of pacing: timing stays exact
    rows = sink.rows()
    assert len(rows) == 1000 * len(trace)
    assert all(len(t) <= replay_plan.CHUNK_RECORDS for t in sink.tables)
    starts = [r["start_ns"] for r in rows]
    assert starts == sorted(starts)
    t0, period = starts[0], trace.span_ns + LOOP_GAP_NS
    per_loop = Counter((s - t0) // period for s in starts)
    assert per_loop == dict.fromkeys(range(1000), len(trace))
    last = [r for r in rows if (r["start_ns"] - t0) // period == 999]
    assert Counter(row_key(r, sink, t0) for r in last) == trace_keys(trace, shift=999 * period)
    # every GPU record has an id, unique across loops (its API call shares it)
    corr = [r["correlation"] for r in rows if r["kind"] in (1, 2, 3, 4)]
    assert 0 not in corr and len(set(corr)) == len(corr)


@needs_traces
def test_max_speed_with_repeats_compresses_time_into_one_recording() -> None:
    # 1000 loops of a 16.5 s recording at max: stamped over ~16.5 s, not 4.6 hours
    # past the wall clock; every duration and offset divided by the repeat count.
    path = trace_file("kineto-hta/simple_add.json.gz")
    trace = load_trace(path)
    n, repeat = len(trace), 1000
    sink, before, after = replay_all(path, speed=None, repeat=repeat)
    rows = sink.rows()
    assert len(rows) == repeat * n
    starts = [r["start_ns"] for r in rows]
    assert starts == sorted(starts) and before <= starts[0] <= after
    period = -(-(trace.span_ns + LOOP_GAP_NS) // repeat)
    assert max(r["start_ns"] + r["duration_ns"] for r in rows) - starts[0] <= repeat * period
    first, last = rows[:n], rows[-n:]  # emitted loop by loop
    t_first, t_last = first[0]["start_ns"], last[0]["start_ns"]
    expected = Counter(
        ((trace.column("start_ns")[i] - trace.column("start_ns")[0]) // repeat,
         max(1, d // repeat) if (d := trace.column("duration_ns")[i]) else 0)
        for i in range(n)
    )  # fmt: skip
    for loop, t in ((first, t_first), (last, t_last)):
        assert Counter((r["start_ns"] - t, r["duration_ns"]) for r in loop) == expected
    for i in range(1, repeat):  # loops never overlap
        earlier, later = rows[(i - 1) * n : i * n], rows[i * n : (i + 1) * n]
        assert max(r["start_ns"] + r["duration_ns"] for r in earlier) <= later[0]["start_ns"]


def test_protocol_details(tmp_path: Path) -> None:
    path = kineto_kernels(tmp_path, [0])
    source = ReplaySource(path, speed=None, repeat=1)
    assert source.name == f"replay:{path}"
    assert source.tracer_clock_ns() is None
    source.stop(time.monotonic())  # before start: nothing to do
    with pytest.raises(ValueError):
        ReplaySource(path, speed=0.0, repeat=1)
    with pytest.raises(ValueError):
        ReplaySource(path, speed=None, repeat=0)


def test_column_shifts_match_with_and_without_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    import array

    starts = array.array("q", range(0, 1000 * 7, 7))
    corr = array.array("q", [0, 1, 2, (1 << 32) - 2] * 250)
    shift = (1 << 32) - 3  # wraps past uint32, skipping 0 ("no correlation")
    fast = (replay_plan.shift_starts(starts, 10**18), replay_plan.shift_correlations(corr, shift))
    monkeypatch.setattr(replay_plan, "_numpy", lambda: None)
    slow = (replay_plan.shift_starts(starts, 10**18), replay_plan.shift_correlations(corr, shift))
    assert fast == slow
    assert all(type(col) is array.array for col in fast + slow)
    assert list(slow[1][:4]) == [0, (1 << 32) - 2, (1 << 32) - 1, (1 << 32) - 4]


def test_check_replay_trace_reads_only_the_start(tmp_path: Path) -> None:
    from tfprof.agent.inprocess.errors import UsageError
    from tfprof.agent.inprocess.sources.replay_trace import check_replay_trace

    good = tmp_path / "t.json.gz"
    good.write_bytes(gzip.compress(b'  {"traceEvents": [' + b" " * 10_000_000))
    check_replay_trace(str(good))  # the start looks like JSON: the rest is replay's job
    for name, data in (("a.txt", b"hello"), ("b.gz", gzip.compress(b"hello")),
                       ("c.gz", b"\x1f\x8bnot gzip"), ("d.json", b"")):  # fmt: skip
        (tmp_path / name).write_bytes(data)
        with pytest.raises(UsageError, match=str(tmp_path / name)):
            check_replay_trace(str(tmp_path / name))
    with pytest.raises(UsageError, match="not found"):
        check_replay_trace(str(tmp_path / "missing.json"))
    with pytest.raises(UsageError, match="not found"):
        check_replay_trace(str(tmp_path))
