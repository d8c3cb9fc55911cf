"""agent/inprocess/capture_control.py: capture modes, the window schedule (merging, past windows,
periodic windows) and the controller that applies its edges, driven by a clock the
test sets; and capture frames read from a real socket pair."""

from __future__ import annotations

import socket
import threading

import pytest

from tfprof.agent.inprocess import config, frames
from tfprof.agent.inprocess.capture_control import (
    ALWAYS_MODE,
    CaptureController,
    CaptureMode,
    CaptureSchedule,
    Window,
    parse_capture_mode,
    parse_duration,
)
from tfprof.agent.inprocess.errors import ConfigError

S = 10**9
ON_DEMAND = CaptureMode("on-demand")


@pytest.mark.parametrize(
    ("text", "mode"),
    [
        ("always", ALWAYS_MODE),
        ("", ALWAYS_MODE),
        ("On-Demand", ON_DEMAND),
        ("periodic:2s/60s", CaptureMode("periodic", 2 * S, 60 * S)),
        ("periodic:500ms/1.5m", CaptureMode("periodic", S // 2, 90 * S)),
        ("periodic:1/3", CaptureMode("periodic", S, 3 * S)),
    ],
)
def test_modes_parse(text: str, mode: CaptureMode) -> None:
    assert parse_capture_mode(text) == mode
    assert parse_capture_mode(str(mode)) == mode  # str() round-trips


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("sometimes", "expected always, on-demand or periodic:ON/EVERY"),
        ("periodic:2s", "expected periodic:ON/EVERY with durations"),
        ("periodic:2x/60s", "expected periodic:ON/EVERY with durations"),
        ("periodic:60s/60s", "ON must be shorter than EVERY"),
        ("periodic:61s/60s", "ON must be shorter than EVERY"),
        ("periodic:1ms/1s", "at least 10ms"),
    ],
)
def test_bad_modes_are_one_line_naming_the_setting(text: str, why: str) -> None:
    with pytest.raises(ConfigError) as info:
        config.load({"TFPROF_CAPTURE": text})
    message = str(info.value)
    assert message.startswith(f"TFPROF_CAPTURE={text!r}: ") and why in message
    assert "\n" not in message
    with pytest.raises(ConfigError, match=rf"^--capture {text}: "):
        parse_capture_mode(text, "--capture")


def test_config_reads_capture_settings() -> None:
    cfg = config.load({"TFPROF_CAPTURE": "periodic:2s/60s", "TFPROF_CAPTURE_FINALIZE": "1"})
    assert cfg.capture == CaptureMode("periodic", 2 * S, 60 * S) and cfg.capture_finalize
    default = config.load({})
    assert default.capture == ALWAYS_MODE and not default.capture_finalize
    with pytest.raises(ConfigError, match="TFPROF_CAPTURE_FINALIZE='maybe'"):
        config.load({"TFPROF_CAPTURE_FINALIZE": "maybe"})


def test_durations() -> None:
    assert parse_duration("250us") == 250_000
    assert parse_duration("2h") == 7200 * S
    with pytest.raises(ValueError):
        parse_duration("-1s")


def test_windows_merge_when_they_overlap_or_touch_and_stay_sorted() -> None:
    sched = CaptureSchedule(ON_DEMAND, started_ns=0)
    assert sched.add(50 * S, 10 * S, now_ns=0)
    assert sched.add(10 * S, 5 * S, now_ns=0)
    assert sched.add(30 * S, 5 * S, now_ns=0)
    assert sched.windows() == [Window(10 * S, 15 * S), Window(30 * S, 35 * S),
                               Window(50 * S, 60 * S)]  # fmt: skip
    assert sched.add(14 * S, 16 * S, now_ns=0)  # 14..30: bridges the first two
    assert sched.windows() == [Window(10 * S, 35 * S), Window(50 * S, 60 * S)]
    assert sched.add(60 * S, 1 * S, now_ns=0)  # touching: one window
    assert sched.add(5 * S, 100 * S, now_ns=0)  # covers everything
    assert sched.windows() == [Window(5 * S, 105 * S)]


def test_windows_already_over_are_ignored_and_old_ones_forgotten() -> None:
    sched = CaptureSchedule(ON_DEMAND, started_ns=0)
    assert not sched.add(10 * S, 5 * S, now_ns=20 * S)
    assert not sched.add(30 * S, 0, now_ns=0)
    assert sched.add(10 * S, 5 * S, now_ns=0)
    assert sched.add(40 * S, 5 * S, now_ns=20 * S)  # forgets 10..15, over by now
    assert sched.windows() == [Window(40 * S, 45 * S)]
    assert sched.add(0, 50 * S, now_ns=20 * S)  # started already: the rest counts
    assert sched.state_at(20 * S) == (True, 50 * S)


def test_on_demand_state_and_next_edges() -> None:
    sched = CaptureSchedule(ON_DEMAND, started_ns=0)
    assert sched.state_at(5 * S) == (False, None)
    sched.add(10 * S, 5 * S, now_ns=0)
    assert sched.state_at(5 * S) == (False, 10 * S)
    assert sched.state_at(10 * S) == (True, 15 * S)  # [start, end)
    assert sched.state_at(15 * S) == (False, None)


def test_periodic_windows_start_at_multiples_of_the_period_after_start() -> None:
    sched = CaptureSchedule(CaptureMode("periodic", 2 * S, 10 * S), started_ns=13 * S)
    # Nothing before 20 s: the window at 10 s had begun before the process started.
    assert sched.state_at(13 * S) == (False, 20 * S)
    assert sched.state_at(20 * S) == (True, 22 * S)
    assert sched.state_at(21 * S) == (True, 22 * S)
    assert sched.state_at(22 * S) == (False, 30 * S)
    assert sched.state_at(39 * S) == (False, 40 * S)
    # A pushed window adds to the periodic ones; its edges come first when earlier.
    sched.add(25 * S, 1 * S, now_ns=22 * S)
    assert sched.state_at(22 * S) == (False, 25 * S)
    assert sched.state_at(25 * S) == (True, 26 * S)


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[bool, int]] = []

    def __call__(self, on: bool, at_ns: int) -> None:
        self.calls.append((on, at_ns))


def controller(
    sched: CaptureSchedule, now: list[int], lead_ns: int = 0
) -> tuple[CaptureController, Recorder]:
    rec = Recorder()
    return CaptureController(sched, rec, lead_ns=lead_ns, now_ns=lambda: now[0]), rec


def test_controller_applies_each_edge_once_dated_at_the_edge() -> None:
    now = [0]
    sched = CaptureSchedule(CaptureMode("periodic", 1 * S, 4 * S), started_ns=0)
    ctl, rec = controller(sched, now)
    assert ctl.advance() == 1 * S and rec.calls == [(True, 0)]
    now[0] = 1 * S + 3_000_000  # woken 3 ms late: the change is dated at the edge
    assert ctl.advance() == 4 * S
    assert rec.calls == [(True, 0), (False, 1 * S)]
    now[0] = 4 * S
    ctl.advance()
    now[0] = 9 * S + 1  # slept through a whole window (4..5) and into the next
    ctl.advance()
    assert rec.calls == [(True, 0), (False, 1 * S), (True, 4 * S), (False, 5 * S),
                         (True, 8 * S), (False, 9 * S)]  # fmt: skip


def test_controller_with_a_lead_applies_edges_ahead_and_never_dates_before_now() -> None:
    now = [100 * S]
    sched = CaptureSchedule(ON_DEMAND, started_ns=0)
    ctl, rec = controller(sched, now, lead_ns=S // 2)
    sched.add(100 * S + S // 4, 1 * S, now_ns=now[0])  # within the lead: applied now
    assert ctl.advance() == 101 * S + S // 4
    assert rec.calls == [(True, 100 * S + S // 4)]
    now[0] = 101 * S  # the end is within the lead: announced ahead, at its instant
    assert ctl.advance() is None
    assert rec.calls[-1] == (False, 101 * S + S // 4)
    # A window that began before it arrived is captured from now on, never before.
    now[0] = 200 * S
    ctl.receive(frames.encode_capture_frame("late", 150 * S, 60 * S))
    ctl.advance()
    assert rec.calls[-1] == (True, 200 * S)


def test_stopping_ends_a_window_in_progress_at_the_present() -> None:
    """At exit the window ends with the process (a replay source drains on after)."""
    now = [0]
    sched = CaptureSchedule(CaptureMode("periodic", 2 * S, 4 * S), started_ns=0)
    ctl, rec = controller(sched, now)
    ctl.advance()
    now[0] = 1 * S
    ctl.stop(1.0)
    assert rec.calls == [(True, 0), (False, 1 * S)] and not ctl.capturing
    # A start applied ahead (the lead) closes at that start: an empty window.
    ahead, rec = controller(CaptureSchedule(CaptureMode("periodic", 1 * S, 4 * S), 0), now,
                            lead_ns=5 * S)  # fmt: skip
    now[0] = 3 * S + 500_000_000  # edges up to 8.5 s applied: on at 4 s, off at 5 s, on at 8 s
    ahead.advance()
    ahead.stop(1.0)
    assert rec.calls == [(True, 4 * S), (False, 5 * S), (True, 8 * S), (False, 8 * S)]
    # Outside every window nothing more is applied.
    idle, rec = controller(CaptureSchedule(CaptureMode("on-demand"), 0), now)
    idle.advance()
    idle.stop(1.0)
    assert rec.calls == []


def test_controller_reads_capture_frames_split_anywhere_and_skips_what_it_does_not_know() -> None:
    now = [10 * S]
    sched = CaptureSchedule(ON_DEMAND, started_ns=0)
    ctl, _ = controller(sched, now)
    data = (
        frames.encode_capture_frame("c1", 20 * S, 2 * S)
        + frames.encode_json_frame(frames.FrameType.HELLO, {"not": "a window"})
        + frames.encode_frame(frames.FrameType.CAPTURE, b"{broken")
        + frames.encode_capture_frame("c2", 21 * S, 4 * S)
        + frames.encode_capture_frame("old", 1 * S, 1 * S)  # over: ignored
    )
    for i in range(0, len(data), 7):
        ctl.receive(data[i : i + 7])
    assert ctl.windows_received == 3
    assert sched.windows() == [Window(20 * S, 25 * S)]


def test_controller_thread_follows_windows_from_a_real_socket() -> None:
    import time

    sched = CaptureSchedule(ON_DEMAND, started_ns=time.time_ns())
    changed = threading.Event()
    calls: list[tuple[bool, int]] = []

    def apply(on: bool, at_ns: int) -> None:
        calls.append((on, at_ns))
        if not on:
            changed.set()

    ctl = CaptureController(sched, apply)
    launcher, hook_end = socket.socketpair()
    try:
        ctl.start(hook_end)
        start = time.time_ns() + 200_000_000
        launcher.sendall(frames.encode_capture_frame("c", start, 300_000_000))
        assert changed.wait(10.0)
        assert calls == [(True, start), (False, start + 300_000_000)]
    finally:
        ctl.stop(5.0)
        launcher.close()
        hook_end.close()
    assert ctl._thread is not None and not ctl._thread.is_alive()


def test_controller_reads_windows_from_a_reattached_socket() -> None:
    """A daemon-relayed hook reconnects: windows then come down the new connection."""
    import time

    sched = CaptureSchedule(ON_DEMAND, started_ns=time.time_ns())
    closed = threading.Event()
    calls: list[tuple[bool, int]] = []

    def apply(on: bool, at_ns: int) -> None:
        calls.append((on, at_ns))
        if not on:
            closed.set()

    ctl = CaptureController(sched, apply)
    old_daemon, old_hook = socket.socketpair()
    new_daemon, new_hook = socket.socketpair()
    try:
        ctl.start(old_hook)
        old_daemon.close()  # the daemon died: the reader sees end of file
        ctl.attach(new_hook)
        start = time.time_ns() + 200_000_000
        new_daemon.sendall(frames.encode_capture_frame("c", start, 100_000_000))
        assert closed.wait(10.0)
        assert calls == [(True, start), (False, start + 100_000_000)]
        assert ctl.windows_received == 1
    finally:
        ctl.stop(5.0)
        for s in (new_daemon, old_hook, new_hook):
            s.close()
    assert ctl._thread is not None and not ctl._thread.is_alive()
