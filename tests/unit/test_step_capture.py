"""Capture by steps inside the hook (step_capture.py, capture_control.py), and the replay
source's steps, stretch and collective strings (sources/replay.py) on real traces."""

from __future__ import annotations

import json
import re
import socket
import time

import pytest

from tests.traces import shared_traces
from tests.unit.replay_sink import FakeSink
from tfprof.agent.inprocess import frames
from tfprof.agent.inprocess.capture_control import ON_DEMAND, CaptureController, CaptureMode
from tfprof.agent.inprocess.capture_control import CaptureSchedule as Schedule
from tfprof.agent.inprocess.sources.replay import ReplaySource
from tfprof.agent.inprocess.step_capture import StepRequest, StepWindows, median_gap, plan
from tfprof.core import collectives
from tfprof.core.records import RecordKind
from tfprof.readers import load_trace

OF2 = "kineto-hta-dist/nccl_allreduce_rank0_of2.json.gz"
MS = 10**6


def request(after: int, steps: int, skip: int = 0, deadline: int = 10**12) -> StepRequest:
    return StepRequest("cap-1", after, steps, skip, deadline)


def test_a_window_opens_at_the_first_boundary_half_a_step_after_the_request() -> None:
    boundaries = [0, 100, 200, 300, 400, 500, 600]
    # Requested at 140, guard half a step: 200 (>= 190) is the first boundary; skipping
    # one more opens at 300; three steps close at 600.
    assert plan(request(140, 3, skip=1), boundaries, 100) == (300, 600, False)
    # Requested at 190, just before a boundary: ranks on either side of 200 would
    # disagree about "the next one", so the guard moves every rank to 300.
    assert plan(request(190, 1), boundaries, 100) == (300, 400, False)
    assert plan(request(190, 10), boundaries, 100) is None  # runs out of boundaries
    assert plan(request(190, 1, deadline=250), boundaries, 100) is None  # opens too late


def test_live_step_windows_count_boundaries_after_the_guard() -> None:
    windows = StepWindows()
    for t in (0, 100, 200):
        windows.boundary(t)
    windows.add(request(260, 2, skip=1))  # guard 50: boundaries from 310 count
    assert windows.boundary(300) == []  # before the guard
    assert windows.boundary(400) == []  # skipped
    opened = windows.boundary(500)
    assert opened == [("cap-1", (500, 10**12, True))]
    assert windows.boundary(600) == []
    assert windows.boundary(700) == [("cap-1", (500, 700, False))]
    assert windows.boundary(800) == []  # done: no second window
    assert not windows.seen("cap-2") and windows.seen("cap-2")  # a resent request is ignored
    assert median_gap([5, 1, 3]) == 2 and median_gap([7]) == 0


def test_a_step_window_is_applied_on_the_boundarys_thread() -> None:
    applied: list[tuple[bool, int]] = []
    now = [1_000 * MS]
    schedule = Schedule(CaptureMode(ON_DEMAND), now[0])
    controller = CaptureController(schedule, lambda on, at: applied.append((on, at)),
                                   now_ns=lambda: now[0])  # fmt: skip
    frame = frames.encode_capture_frame("cap-9", now[0], 60_000 * MS, steps=2, skip_steps=0)
    a, b = socket.socketpair()
    try:
        controller.receive(frame[:7])  # a frame split across reads
        controller.receive(frame[7:])
    finally:
        a.close()
        b.close()
    for t in (1_010, 1_110, 1_210):
        now[0] = t * MS
        controller.step_boundary(now[0])
    # Opened at 1010 by the boundary call itself; closed at 1210 (two steps later) by the
    # capture thread's advance.
    assert applied == [(True, 1_010 * MS)]
    controller.advance()
    assert applied == [(True, 1_010 * MS), (False, 1_210 * MS)]
    assert schedule.covers(1_200 * MS) and not schedule.covers(1_210 * MS)


def test_replay_knows_its_steps_and_a_stretched_rank_lands_further_out() -> None:
    path = str(shared_traces() / OF2)
    trace = load_trace(path)
    profiler = {i for i, n in enumerate(trace.names) if re.fullmatch(r"ProfilerStep#\d+", n)}
    steps = sorted(
        s for k, n, t, s in zip(trace.column("kind"), trace.column("name"), trace.column("thread"),
                                trace.column("start_ns"), strict=True)
        if k == RecordKind.MARKER and n in profiler and t
    )  # fmt: skip
    assert len(steps) == 3
    origin = time.time_ns() - 10**9  # a run origin a second ago (an earlier rank's)
    plain = ReplaySource(path, speed=None, origin_ns=origin)
    stretched = ReplaySource(path, speed=None, stretch=1.3, origin_ns=origin)
    sinks = FakeSink(), FakeSink()
    for source, sink in zip((plain, stretched), sinks, strict=True):
        source.start(sink)
        source.stop(time.monotonic() + 60)
    period, starts = plain.step_boundaries(origin)
    assert list(starts) == [origin + s for s in steps]
    assert period == median_gap(steps) > 0
    _, stretched_starts = stretched.step_boundaries(origin)
    assert list(stretched_starts) == [origin + round(s * 1.3) for s in steps]
    # Records: the same ones, stretched around the origin; the step markers replayed are
    # exactly the boundaries announced.
    rows = [sink.rows() for sink in sinks]
    assert len(rows[0]) == len(rows[1]) == len(trace)
    assert min(r["start_ns"] for r in rows[0]) == origin
    ends = [max(r["start_ns"] + r["duration_ns"] for r in part) - origin for part in rows]
    assert abs(ends[1] - round(ends[0] * 1.3)) <= 2
    step_name = re.compile(r"ProfilerStep#\d+")
    marked = sorted(
        r["start_ns"]
        for r in rows[0]
        if step_name.fullmatch(sinks[0].name(r["name"])) and r["thread"]
    )
    assert marked == [origin + s for s in steps]
    # Collective strings travel through the sink's string table.
    named = [sinks[0].name(r["collective"]) for r in rows[0] if r["collective"]]
    kernels = [collectives.parse(n) for n in named]
    assert sum(1 for k in kernels if k["collective"] in ("allreduce", "broadcast")) >= 21


def test_capture_frames_carry_steps_only_when_asked() -> None:
    plain = frames.encode_capture_frame("c", 5, 10)
    stepped = frames.encode_capture_frame("c", 5, 10, steps=3, skip_steps=1)
    assert "steps" not in json.loads(plain[frames.HEADER.size :])
    assert json.loads(stepped[frames.HEADER.size :])["steps"] == 3


@pytest.mark.parametrize("value", ["0", "-1", "x", "1001"])
def test_bad_stretch_is_refused(value: str) -> None:
    from tfprof.agent.inprocess import config
    from tfprof.agent.inprocess.errors import ConfigError

    with pytest.raises(ConfigError, match="TFPROF_REPLAY_STRETCH"):
        config.load({"TFPROF_REPLAY_STRETCH": value})


def test_tfprof_rank_comes_first() -> None:
    from tfprof.agent.inprocess import config
    from tfprof.agent.inprocess.errors import ConfigError

    assert config.load({"RANK": "3", "TFPROF_RANK": "5"}).rank == "5"
    assert config.load({"RANK": "3"}).rank == "3"
    assert config.load({"TFPROF_RANK": "07"}).rank == "7"
    with pytest.raises(ConfigError, match="TFPROF_RANK"):
        config.load({"TFPROF_RANK": "a"})
