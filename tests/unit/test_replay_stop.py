"""The replay source paced, stopped and refused: pacing by trace time, stop at exit,
blocked, failing and refusing sinks."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.traces import needs_traces
from tfprof.agent.inprocess.sources import replay_plan
from tfprof.agent.inprocess.sources.base import SourceUnavailable
from tfprof.agent.inprocess.sources.replay import ReplaySource
from tfprof.readers import load_trace

from .replay_sink import FakeSink, kineto_kernels, trace_file


def test_speed_paces_batches_by_trace_time(tmp_path: Path) -> None:
    path = kineto_kernels(tmp_path, [0, 30_000, 60_000, 90_000])  # µs
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
    path = kineto_kernels(tmp_path, [0, 60_000_000])  # the second kernel is due in a minute
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
    path = trace_file("tf-timeline-ikhlestov/GPU_timeline_02_step_1.json")
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
    path = kineto_kernels(tmp_path, [0, 10])
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
    path = kineto_kernels(tmp_path, [0, 10])
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


def test_stop_from_another_thread_during_start_never_joins_an_unstarted_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The hook's exit may call stop() while start() is between creating the replay
    # thread and starting it: stop() must wait for the start, not fail on join().
    path = kineto_kernels(tmp_path, [0, 10])
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
