"""Capture modes and the schedule of capture windows a hook follows.

``always`` traces from process start to exit (the default of ``tfprof-agent run``).
``on-demand`` arms the tracer with every activity off; windows pushed by the collector
(through the launcher's relay) turn it on and off. ``periodic:ON/EVERY`` opens a window
of ON every EVERY by itself: windows start at multiples of EVERY on the host's realtime
clock, so every process of a fleet captures the same instants, and pushed windows are
honoured too. A pushed window may also ask for steps instead of a time
(``step_capture``): it opens and closes at the process's step boundaries. Imported
inside user processes: standard library only.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import os
import re
import select
import socket
import threading
from collections.abc import Callable, Iterator
from typing import NamedTuple

from tfprof.agent.inprocess import clock, frames
from tfprof.agent.inprocess.errors import ConfigError
from tfprof.agent.inprocess.step_capture import StepRequest, StepWindows, plan

ALWAYS = "always"
ON_DEMAND = "on-demand"
PERIODIC = "periodic"

_UNITS_NS = {"ns": 1, "us": 10**3, "ms": 10**6, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9}
_DURATION = re.compile(r"^([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|ms|s|m|h)?$")
# A window shorter than this cannot be honoured by a timer thread on a busy host.
MIN_WINDOW_NS = 10**7
# Step windows kept after they closed (the step markers of their last steps are judged
# against them once those steps end).
KEEP_STEP_WINDOWS = 64

# Boundaries known ahead (replay): the step period and the step starts at or after an
# instant, in order.
KnownBoundaries = Callable[[int], "tuple[int, Iterator[int]]"]


class CaptureMode(NamedTuple):
    kind: str  # ALWAYS, ON_DEMAND or PERIODIC
    on_ns: int = 0  # periodic: window length
    every_ns: int = 0  # periodic: period

    def __str__(self) -> str:
        if self.kind != PERIODIC:
            return self.kind
        return f"{PERIODIC}:{format_duration(self.on_ns)}/{format_duration(self.every_ns)}"


ALWAYS_MODE = CaptureMode(ALWAYS)


def format_duration(ns: int) -> str:
    for unit in ("h", "m", "s", "ms", "us"):
        if ns % _UNITS_NS[unit] == 0:
            return f"{ns // _UNITS_NS[unit]}{unit}"
    return f"{ns}ns"


def parse_duration(text: str) -> int:
    """``2s``, ``500ms``, ``1.5m``, ``90`` (seconds) as nanoseconds; ValueError if not."""
    match = _DURATION.match(text.strip().lower())
    if match is None:
        raise ValueError(text)
    number, unit = match.groups()
    return round(float(number) * _UNITS_NS[unit or "s"])


def parse_capture_mode(value: str, label: str = "TFPROF_CAPTURE") -> CaptureMode:
    """The mode ``value`` names, or ``ConfigError`` (one line, naming ``label``)."""
    text = value.strip().lower()
    if text in ("", ALWAYS):
        return ALWAYS_MODE
    if text == ON_DEMAND:
        return CaptureMode(ON_DEMAND)
    where = f"{label} {value}" if label.startswith("--") else f"{label}={value!r}"
    if not text.startswith(PERIODIC + ":"):
        raise ConfigError(f"{where}: expected always, on-demand or periodic:ON/EVERY (e.g. "
                          "periodic:2s/60s)")  # fmt: skip
    on_text, sep, every_text = text[len(PERIODIC) + 1 :].partition("/")
    try:
        if not sep:
            raise ValueError(text)
        on_ns, every_ns = parse_duration(on_text), parse_duration(every_text)
    except ValueError:
        raise ConfigError(
            f"{where}: expected periodic:ON/EVERY with durations such as 500ms, 2s, 1m"
        ) from None
    if on_ns < MIN_WINDOW_NS:
        raise ConfigError(f"{where}: a window must last at least 10ms")
    if on_ns >= every_ns:
        raise ConfigError(f"{where}: ON must be shorter than EVERY (a duty cycle below 100%)")
    return CaptureMode(PERIODIC, on_ns, every_ns)


class Window(NamedTuple):
    start_ns: int  # host realtime clock
    end_ns: int


class CaptureSchedule:
    """When the tracer should capture: pushed windows (merged when they overlap or
    touch) plus, in periodic mode, the mode's own windows. Thread-safe; times are
    nanoseconds on the host's realtime clock."""

    def __init__(self, mode: CaptureMode, started_ns: int) -> None:
        self.mode = mode
        # Periodic windows begin at the first multiple of EVERY at or after the start,
        # so no process captures a truncated first window.
        every = mode.every_ns
        self._periodic_from = -(-started_ns // every) * every if every else 0
        self._windows: list[Window] = []  # sorted, disjoint
        # Step windows by capture id (they open and close at step boundaries, so they
        # are kept apart from the merged time windows); an open one ends at its deadline.
        self._steps: dict[str, Window] = {}
        self._lock = threading.Lock()

    def add(self, start_ns: int, duration_ns: int, now_ns: int) -> bool:
        """Add a window; False (and ignored) when it is empty or already over."""
        end_ns = start_ns + duration_ns
        if duration_ns <= 0 or end_ns <= now_ns:
            return False
        with self._lock:
            windows = self._windows
            # Drop what is over, then merge the new window with every one it touches.
            while windows and windows[0].end_ns <= now_ns:
                windows.pop(0)
            i = bisect.bisect_left(windows, Window(start_ns, start_ns))
            if i > 0 and windows[i - 1].end_ns >= start_ns:
                i -= 1
            j = i
            while j < len(windows) and windows[j].start_ns <= end_ns:
                start_ns = min(start_ns, windows[j].start_ns)
                end_ns = max(end_ns, windows[j].end_ns)
                j += 1
            windows[i:j] = [Window(start_ns, end_ns)]
        return True

    def set_step_window(self, capture_id: str, start_ns: int, end_ns: int) -> None:
        """Open, or close, the step window of ``capture_id``: [start, end)."""
        with self._lock:
            self._steps.pop(capture_id, None)
            self._steps[capture_id] = Window(start_ns, max(start_ns, end_ns))
            while len(self._steps) > KEEP_STEP_WINDOWS:
                del self._steps[next(iter(self._steps))]

    def windows(self) -> list[Window]:
        with self._lock:
            return sorted(self._windows + list(self._steps.values()))

    def covers(self, t_ns: int) -> bool:
        """Whether a window known now holds the instant ``t_ns`` (a past one too, while
        it is kept)."""
        if self._periodic_at(t_ns)[0]:
            return True
        with self._lock:
            windows = self._windows + list(self._steps.values())
        return any(w.start_ns <= t_ns < w.end_ns for w in windows)

    def _periodic_at(self, now_ns: int) -> tuple[bool, int | None]:
        on, every = self.mode.on_ns, self.mode.every_ns
        if self.mode.kind != PERIODIC:
            return False, None
        if now_ns < self._periodic_from:
            return False, self._periodic_from
        phase = (now_ns - self._periodic_from) % every
        if phase < on:
            return True, now_ns - phase + on
        return False, now_ns - phase + every

    def state_at(self, now_ns: int) -> tuple[bool, int | None]:
        """(capturing at ``now_ns``, the next instant that may change it, or None).

        The next instant is an edge of some window; when another window still covers
        it, nothing changes there and the caller simply asks again.
        """
        capturing, change = self._periodic_at(now_ns)
        with self._lock:
            windows = self._windows + list(self._steps.values())
        for window in windows:
            if window.end_ns <= now_ns:
                continue
            if window.start_ns <= now_ns:
                capturing = True
                edge = window.end_ns
            else:
                edge = window.start_ns
            change = edge if change is None else min(change, edge)
        return capturing, change


class CaptureController:
    """Turns the source's capturing on and off at the schedule's edges, on one small
    daemon thread that also reads the capture frames the launcher sends down the hook's
    socket. It never touches the training thread: the thread sleeps in ``select``
    until the next edge, a frame, or ``stop``.

    ``apply(on, at_ns)`` is called at each change, ``lead_ns`` before the edge ``at_ns``
    (a source that acts at once wants 0; one that must know an edge before it emits the
    records around it, as replay does, asks for more). A change is never dated before
    the present nor before an edge already applied, so nothing outside a window is ever
    captured, even when a window arrives late.
    """

    def __init__(
        self,
        schedule: CaptureSchedule,
        apply: Callable[[bool, int], None],
        lead_ns: int = 0,
        now_ns: Callable[[], int] = clock.now_ns,
        on_error: Callable[[BaseException], None] | None = None,
        known_boundaries: KnownBoundaries | None = None,
    ) -> None:
        self.schedule = schedule
        self.steps = StepWindows()
        self._known_boundaries = known_boundaries
        self._advance_lock = threading.RLock()  # the training thread opens step windows
        self._apply = apply
        self._lead_ns = lead_ns
        self._now_ns = now_ns
        self._on_error = on_error
        self.capturing = False  # the state last applied (armed with activities off)
        self.windows_received = 0
        self._cursor = now_ns()  # the latest instant whose state was applied
        self._wake_r, self._wake_w = os.pipe()
        self._thread: threading.Thread | None = None
        self._buffer = bytearray()
        self._next_sock: socket.socket | None = None  # a new connection to read from
        self._stopping = False

    def attach(self, sock: socket.socket) -> None:
        """Read windows from ``sock`` from now on (a node daemon's hook reconnects)."""
        self._next_sock = sock
        self._wake(b"a")

    def _wake(self, why: bytes) -> None:
        with contextlib.suppress(OSError):
            os.write(self._wake_w, why)

    def step_boundary(self, t_ns: int) -> None:
        """A step of this process starts at ``t_ns`` (called on the training thread by
        the step markers): a step window that opens here is applied at once, on this
        thread, so the step's first launches are captured; closing (which flushes) is
        left to the capture thread."""
        if self._known_boundaries is not None:
            return  # the source's own steps decide (replay)
        changed = self.steps.boundary(t_ns)
        for capture_id, span in changed:
            self.schedule.set_step_window(capture_id, span.start_ns, span.end_ns)
        if any(span.opened for _, span in changed):
            self.advance()
        if changed:
            self._wake(b"w")

    def request_steps(self, request: StepRequest) -> None:
        """A window of ``request.steps`` steps (``step_capture``)."""
        if request.steps < 1 or self.steps.seen(request.capture_id):
            return
        known = self._known_boundaries
        if known is None:
            self.steps.add(request)
            return
        period, boundaries = known(request.after_ns)
        span = plan(request, boundaries, period)
        if span is not None:
            self.schedule.set_step_window(request.capture_id, span.start_ns, span.end_ns)

    def start(self, sock: socket.socket | None) -> None:
        self._thread = threading.Thread(
            target=self._run, args=(sock,), name="tfprof-capture", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float) -> None:
        """End the thread, then any window in progress at the present: capture ends
        with the process, and a source that runs on at exit (replay drains its thread)
        must record nothing past it. An edge already applied ahead (the lead) stays."""
        self._stopping = True
        self._wake(b"x")
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                return  # stuck in the source: its pipe stays open rather than be reused
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)
        if self.capturing:
            self.capturing = False
            try:
                self._apply(False, max(self._now_ns(), self._cursor))
            except Exception as exc:
                if self._on_error is not None:
                    self._on_error(exc)

    def advance(self) -> int | None:
        """Apply every edge up to now + lead; the next edge to wake for, or None."""
        with self._advance_lock:
            return self._advance()

    def _advance(self) -> int | None:
        now = self._now_ns()
        horizon = now + self._lead_ns
        while True:
            capturing, change = self.schedule.state_at(self._cursor)
            if capturing != self.capturing:
                self.capturing = capturing
                try:
                    self._apply(capturing, self._cursor)
                except Exception as exc:  # the source reports its own failures
                    if self._on_error is not None:
                        self._on_error(exc)
            if change is None or change > horizon:
                break
            self._cursor = change
        # Edges up to here are applied: a window that arrives later (or began before
        # it arrived) counts from the present on, never from its past.
        self._cursor = max(self._cursor, now)
        return change

    def receive(self, data: bytes) -> None:
        """Take bytes from the launcher's socket; add the capture windows they complete."""
        buf = self._buffer
        buf += data
        while len(buf) >= frames.HEADER.size:
            kind, length = frames.HEADER.unpack_from(buf)
            if len(buf) < frames.HEADER.size + length:
                return
            payload = bytes(buf[frames.HEADER.size : frames.HEADER.size + length])
            del buf[: frames.HEADER.size + length]
            if kind != frames.FrameType.CAPTURE:
                continue  # a newer launcher's frame this hook does not know
            try:
                window = json.loads(payload)
                start, duration = int(window["start_realtime_ns"]), int(window["duration_ns"])
                steps, skip = int(window.get("steps", 0)), int(window.get("skip_steps", 0))
                capture_id = str(window.get("capture_id", ""))
            except (ValueError, KeyError, TypeError, AttributeError):
                continue
            self.windows_received += 1
            self.advance()  # edges due before the window arrived keep their instants
            if steps > 0:
                self.request_steps(
                    StepRequest(capture_id, start, steps, max(0, skip), start + duration)
                )
            else:
                self.schedule.add(start, duration, self._now_ns())

    def _run(self, sock: socket.socket | None) -> None:
        while True:
            change = self.advance()
            timeout = None
            if change is not None:
                timeout = max(0.0, (change - self._lead_ns - self._now_ns()) / 1e9)
            readers = [self._wake_r] if sock is None else [self._wake_r, sock.fileno()]
            try:
                ready, _, _ = select.select(readers, [], [], timeout)
            except (OSError, ValueError):
                return  # stop() closed the pipe
            if self._wake_r in ready:
                try:
                    woken = os.read(self._wake_r, 64)
                except OSError:
                    return
                if b"x" in woken or self._stopping:
                    return
                if b"a" in woken:  # attach(): a new connection
                    sock, self._next_sock = self._next_sock, None
                    self._buffer.clear()  # a frame cut short by the old one is gone with it
                continue  # b"w": the schedule changed (a step window)
            if sock is not None and len(ready) > 0:
                try:
                    data = sock.recv(1 << 16)
                except OSError:
                    data = b""
                if data:
                    self.receive(data)
                else:
                    sock = None  # the launcher is gone; periodic windows go on
