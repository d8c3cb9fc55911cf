"""The replay source against a recording fake sink."""

from __future__ import annotations

import gzip
import itertools
import json
import re
import socket
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.traces import TRACES, needs_traces
from tfprof.agent.inprocess import frames
from tfprof.agent.inprocess.sources import replay_plan
from tfprof.agent.inprocess.sources.base import SourceUnavailable
from tfprof.agent.inprocess.sources.replay import ReplaySource
from tfprof.agent.inprocess.sources.replay_plan import LOOP_GAP_NS
from tfprof.core.records import COLUMNS, DeviceInfo, RecordKind, RecordTable
from tfprof.readers import RecordedTrace, load_trace


def _trace_file(rel: str) -> str:
    assert TRACES is not None
    return str(TRACES / rel)


class FakeSink:
    """Records what a source hands over; ``block`` holds submit() until released."""

    def __init__(self, accept: bool = True, fail: bool = False, block: bool = False) -> None:
        self.strings = frames.StringTable()
        self.tables: list[RecordTable] = []
        self.submit_times: list[int] = []
        self.devices: list[list[DeviceInfo]] = []
        self.warnings: list[str] = []
        self.accept, self.fail = accept, fail
        self.release = threading.Event()
        if not block:
            self.release.set()
        self.entered = threading.Event()

    def intern(self, name: str) -> int:
        return self.strings.intern(name)

    def submit(self, table: RecordTable, wait: bool = False) -> bool:
        assert wait, "replay runs on its own thread and must wait, not drop"
        self.entered.set()
        self.release.wait()
        if self.fail:
            raise RuntimeError("sink exploded")
        self.submit_times.append(time.monotonic_ns())
        self.tables.append(table)
        return self.accept

    def stack_sink(self) -> None:
        return None  # --code off: no recorded stacks wanted

    def add_devices(self, devices: list[DeviceInfo]) -> None:
        self.devices.append(devices)

    def add_tracer_dropped(self, count: int) -> None:
        raise AssertionError("replay loses nothing in a tracer")

    def warn(self, message: str) -> None:
        self.warnings.append(message)

    def rows(self) -> list[dict[str, int]]:
        out = []
        for table in self.tables:
            cols = [list(table.column(name)) for name in COLUMNS]
            out += [dict(zip(COLUMNS, values, strict=True)) for values in zip(*cols, strict=True)]
        return out

    def name(self, index: int) -> str:
        return self.strings._strings[index]


def _run(path: str, speed: float | None = None, repeat: int = 1) -> tuple[FakeSink, int, int]:
    sink = FakeSink()
    before = time.time_ns()
    source = ReplaySource(path, speed=speed, repeat=repeat)
    source.start(sink)
    source.stop(time.monotonic() + 60)
    return sink, before, time.time_ns()


def _key(row: dict[str, int], sink: FakeSink, origin: int) -> tuple[Any, ...]:
    category = sink.name(row["category"]) if row["kind"] == RecordKind.MARKER else row["category"]
    return (row["start_ns"] - origin, row["duration_ns"], sink.name(row["name"]), row["kind"],
            row["device"], row["stream"], row["copy_kind"], row["bytes"], row["thread"],
            row["cbid"], category)  # fmt: skip


def _trace_keys(trace: RecordedTrace, shift: int = 0) -> Counter[tuple[Any, ...]]:
    c = trace.columns
    return Counter(
        (c["start_ns"][i] + shift, c["duration_ns"][i], trace.names[c["name"][i]], c["kind"][i],
         c["device"][i], c["stream"][i], c["copy_kind"][i], c["bytes"][i], c["thread"][i],
         c["cbid"][i],
         trace.names[c["category"][i]] if c["kind"][i] == RecordKind.MARKER else c["category"][i])
        for i in range(len(trace))
    )  # fmt: skip


@needs_traces
@pytest.mark.parametrize(
    "rel",
    ["tf-timeline-ikhlestov/GPU_timeline_03_merged_5_runs.json", "kineto-hta/simple_add.json.gz"],
)
def test_max_speed_emits_every_record_once(rel: str) -> None:
    path = _trace_file(rel)
    trace = load_trace(path)
    sink, before, after = _run(path)
    rows = sink.rows()
    t0 = min(r["start_ns"] for r in rows)
    assert before <= t0 <= after  # anchored at host time when the replay started
    assert Counter(_key(r, sink, t0) for r in rows) == _trace_keys(trace)
    assert sink.warnings == []
    assert len(sink.devices) == 1
    host = socket.gethostname()
    for info in sink.devices[0]:
        assert info["uuid"] == f"GPU-replay-{host}-{info['ordinal']}"
    expected_name = "NVIDIA A100-PG509-200" if "kineto" in rel else "replayed GPU"
    assert [d["name"] for d in sink.devices[0]] == [expected_name]


@needs_traces
def test_repeat_shifts_loops_forward_without_overlap() -> None:
    path = _trace_file("kineto-hta/event_sync_multi_stream.json.gz")
    trace = load_trace(path)
    sink, _, _ = _run(path, speed=1e6, repeat=3)  # a finite speed: exact timing
    rows = sink.rows()
    assert len(rows) == 3 * len(trace)
    t0 = min(r["start_ns"] for r in rows)
    period = trace.span_ns + LOOP_GAP_NS
    loops: list[list[dict[str, int]]] = [[], [], []]
    for r in rows:
        loops[(r["start_ns"] - t0) // period].append(r)
    for k, loop in enumerate(loops):
        keys = Counter(_key(r, sink, t0) for r in loop)
        assert keys == _trace_keys(trace, shift=k * period)
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
    path = _trace_file("kineto-hta/simple_add.json.gz")
    trace = load_trace(path)
    sink, _, _ = _run(path, speed=1e6, repeat=1000)  # 16.5 ms of pacing: timing stays exact
    rows = sink.rows()
    assert len(rows) == 1000 * len(trace)
    assert all(len(t) <= replay_plan.CHUNK_RECORDS for t in sink.tables)
    starts = [r["start_ns"] for r in rows]
    assert starts == sorted(starts)
    t0, period = starts[0], trace.span_ns + LOOP_GAP_NS
    per_loop = Counter((s - t0) // period for s in starts)
    assert per_loop == dict.fromkeys(range(1000), len(trace))
    last = [r for r in rows if (r["start_ns"] - t0) // period == 999]
    assert Counter(_key(r, sink, t0) for r in last) == _trace_keys(trace, shift=999 * period)
    # every GPU record has an id, unique across loops (its API call shares it)
    corr = [r["correlation"] for r in rows if r["kind"] in (1, 2, 3, 4)]
    assert 0 not in corr and len(set(corr)) == len(corr)


@needs_traces
def test_max_speed_with_repeats_compresses_time_into_one_recording() -> None:
    # 1000 loops of a 16.5 s recording at max: stamped over ~16.5 s, not 4.6 hours
    # past the wall clock; every duration and offset divided by the repeat count.
    path = _trace_file("kineto-hta/simple_add.json.gz")
    trace = load_trace(path)
    n, repeat = len(trace), 1000
    sink, before, after = _run(path, speed=None, repeat=repeat)
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


def _kineto_kernels(tmp_path: Path, offsets_us: list[int]) -> str:
    events = [
        {"ph": "X", "cat": "kernel", "name": f"k{i}", "pid": 0, "tid": 7,
         "ts": 1_000_000 + off, "dur": 1, "args": {"device": 0, "stream": 7, "correlation": i + 1}}
        for i, off in enumerate(offsets_us)
    ]  # fmt: skip
    path = tmp_path / "small.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return str(path)


def test_speed_paces_batches_by_trace_time(tmp_path: Path) -> None:
    path = _kineto_kernels(tmp_path, [0, 30_000, 60_000, 90_000])  # µs
    speed = 3.0  # 30 ms of trace per 10 ms batch window: one kernel per batch
    sink = FakeSink()
    before = time.monotonic_ns()
    source = ReplaySource(path, speed=speed, repeat=1)
    source.start(sink)
    source.stop(time.monotonic() + 60)
    assert [len(t) for t in sink.tables] == [1, 1, 1, 1]
    assert [sink.name(t.column("name")[0]) for t in sink.tables] == ["k0", "k1", "k2", "k3"]
    for offset_us, submitted in zip([0, 30_000, 60_000, 90_000], sink.submit_times, strict=True):
        assert submitted >= before + offset_us * 1000 / speed  # never ahead of the pace

    fast = FakeSink()
    source = ReplaySource(path, speed=None, repeat=1)
    source.start(fast)
    source.stop(time.monotonic() + 60)
    assert [len(t) for t in fast.tables] == [4]
    paced, unpaced = [r["start_ns"] for r in sink.rows()], [r["start_ns"] for r in fast.rows()]
    assert [s - paced[0] for s in paced] == [s - unpaced[0] for s in unpaced]


def _not_replayed(message: str) -> tuple[int, int]:
    m = re.search(r"(\d+) of (\d+) records not replayed", message)
    assert m, message
    return int(m.group(1)), int(m.group(2))


def test_stop_cuts_a_paced_replay_short_and_says_how_much(tmp_path: Path) -> None:
    path = _kineto_kernels(tmp_path, [0, 60_000_000])  # the second kernel is due in a minute
    sink = FakeSink()
    source = ReplaySource(path, speed=1.0, repeat=2)
    source.start(sink)
    source.stop(time.monotonic() + 0.2)
    assert len(sink.warnings) == 1
    left, total = _not_replayed(sink.warnings[0])
    assert total == 4
    assert left == total - len(sink.rows())
    assert left >= 3
    thread = source._thread
    assert thread is not None
    thread.join(5)
    assert not thread.is_alive()
    assert len(sink.rows()) == 4 - left  # nothing more after the cut


@needs_traces
def test_stop_does_not_wait_for_a_blocked_sink() -> None:
    path = _trace_file("tf-timeline-ikhlestov/GPU_timeline_02_step_1.json")
    sink = FakeSink(block=True)
    n = len(load_trace(path))  # 125: 44 GPU records and 81 host op ranges
    total, batch = 400 * n, (replay_plan.CHUNK_RECORDS // n) * n
    source = ReplaySource(path, speed=None, repeat=400)
    source.start(sink)
    assert sink.entered.wait(10)
    source.stop(time.monotonic() + 0.05)
    assert not sink.release.is_set()  # stop returned while the sink still held the batch
    assert len(sink.warnings) == 1
    assert _not_replayed(sink.warnings[0]) == (total - batch, total)
    sink.release.set()
    assert source._thread is not None
    source._thread.join(5)
    assert [len(t) for t in sink.tables] == [batch]
    assert len(sink.warnings) == 1


def test_sink_failure_is_reported_once_and_never_raised(tmp_path: Path) -> None:
    path = _kineto_kernels(tmp_path, [0, 10])
    hooked: list[Any] = []
    old_hook = threading.excepthook
    threading.excepthook = hooked.append
    try:
        sink = FakeSink(fail=True)
        source = ReplaySource(path, speed=None, repeat=3)
        source.start(sink)
        source.stop(time.monotonic() + 10)
    finally:
        threading.excepthook = old_hook
    assert hooked == []
    assert len(sink.warnings) == 1
    assert "RuntimeError: sink exploded" in sink.warnings[0]
    assert _not_replayed(sink.warnings[0]) == (6, 6)


def test_refusing_sink_stops_the_replay(tmp_path: Path) -> None:
    path = _kineto_kernels(tmp_path, [0, 10])
    sink = FakeSink(accept=False)
    source = ReplaySource(path, speed=None, repeat=20_000)  # 40000 records, 5 batches
    source.start(sink)
    source.stop(time.monotonic() + 10)
    assert len(sink.tables) == 1
    assert len(sink.warnings) == 1 and "no longer accepts" in sink.warnings[0]
    assert _not_replayed(sink.warnings[0]) == (40000 - len(sink.tables[0]), 40000)


def test_bad_files_make_the_source_unavailable(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    for path, words in ((bad, "not JSON"), (tmp_path / "absent.json", "cannot read")):
        sink = FakeSink()
        with pytest.raises(SourceUnavailable) as info:
            ReplaySource(str(path), speed=None, repeat=1).start(sink)
        message = str(info.value)
        assert message.startswith("replay: ") and words in message and "\n" not in message
        assert sink.devices == [] and sink.tables == []


def test_protocol_details(tmp_path: Path) -> None:
    path = _kineto_kernels(tmp_path, [0])
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


def test_stop_from_another_thread_during_start_never_joins_an_unstarted_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The hook's exit may call stop() while start() is between creating the replay
    # thread and starting it: stop() must wait for the start, not fail on join().
    path = _kineto_kernels(tmp_path, [0, 10])
    source = ReplaySource(path, speed=None)
    errors: list[BaseException] = []

    def stop_now() -> None:
        try:
            source.stop(time.monotonic() + 30)
        except BaseException as exc:  # what the test looks for
            errors.append(exc)

    real_start = threading.Thread.start
    stopper = threading.Thread(target=stop_now)

    def start_with_a_stop_in_between(self: threading.Thread) -> None:
        if self.name == "tfprof-replay":
            real_start(stopper)
            stopper.join(0.5)  # fixed code: stop() waits on the lock start() holds
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start_with_a_stop_in_between)
    sink = FakeSink()
    source.start(sink)
    stopper.join(30)
    assert not stopper.is_alive()
    assert errors == []
    assert len(sink.rows()) == 2


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
