"""The ``replay:PATH`` tracer source: feed a recorded GPU trace through the live path.

For tests, demos and benchmarks on machines without a GPU. It runs inside the user's
process (standard library only; numpy, when importable, only speeds up the per-loop
column shift with identical results).

Timing: replay starts at host time ``t0``; a record with offset ``o`` (from the trace's
first GPU event) in loop ``k`` gets ``start_ns = t0 + k * (span + LOOP_GAP_NS) + o``, so
spacing and durations are exact and loops never overlap. ``t0`` is the run's replay
origin when the hook gives one (every rank of a run replays from the same instant, so
their records line up to the nanosecond whatever moment each process started), else
the moment the replay starts. ``stretch=F`` multiplies every offset and duration (and
the span) by F: a rank replayed with 1.3 runs 30 % slower than the others. Correlation
ids are shifted per loop (0 stays 0, "none") so they stay unique. With ``speed=X`` a
record is handed to the sink no earlier than ``(offset + loop shift) / X`` after ``t0``
(batches span about ``PACE_WINDOW_S`` of wall time); ``speed=None`` emits as fast as the
sink takes.

``speed=None`` (max) with ``repeat=N > 1`` compresses time N-fold (starts, durations,
gaps): the N loops together span one recording, so a flood of repeats is not stamped
minutes past the wall clock. Exact timing needs a finite speed, where pacing keeps every
record at or before the wall clock. One loop at max is exact and ends at most one
recording's span after it started.

Capture windows: records are captured only when their start falls inside a window
(``set_capturing``); the rest are skipped, not dropped, as CUPTI would never have made
them. The source asks for each edge ``CAPTURE_LEAD_NS`` ahead, so it knows a window
before it emits the records around it; at speed 1 replayed time tracks the wall clock,
faster replays run ahead of it and see only the windows known so far.

Steps: the trace's ``ProfilerStep#N`` host ranges are its steps; ``step_boundaries``
gives their starts as replayed, ahead of time, so capture by steps opens and closes at
them (``step_capture``).
"""

from __future__ import annotations

import array
import bisect
import contextlib
import functools
import threading
import time
from collections.abc import Callable, Iterator

from tfprof.agent.inprocess import clock
from tfprof.agent.inprocess.sources.base import Sink, SourceUnavailable
from tfprof.agent.inprocess.sources.replay_plan import (
    CORRELATION_COL,
    START_COL,
    ReplayPlan,
    ReplayTiming,
    loops_per_block,
    shift_correlations,
    shift_starts,
)
from tfprof.agent.inprocess.sources.replay_stacks import StackReplay
from tfprof.agent.inprocess.sources.replay_trace import replay_devices, step_starts
from tfprof.agent.inprocess.step_capture import median_gap
from tfprof.core.records import RecordTable
from tfprof.readers import RecordedTrace, TraceFormatError, load_trace

CAPTURE_LEAD_NS = 500_000_000
_FOREVER = 1 << 63


class ReplaySource:
    """Replays a recorded trace ``repeat`` times at ``speed`` (None = as fast as possible),
    from ``origin_ns`` (host realtime; None: when it starts), its times ``stretch``ed."""

    def __init__(
        self,
        path: str,
        speed: float | None = None,
        repeat: int = 1,
        stretch: float = 1.0,
        origin_ns: int | None = None,
    ) -> None:
        if speed is not None and not speed > 0:
            raise ValueError(f"replay speed must be > 0 or None (max), got {speed!r}")
        if repeat < 1:
            raise ValueError(f"replay repeat must be >= 1, got {repeat!r}")
        if not stretch > 0:
            raise ValueError(f"replay stretch must be > 0, got {stretch!r}")
        self.name = f"replay:{path}"
        self.capture_lead_ns = CAPTURE_LEAD_NS
        # Capture windows as [start, end) on the host realtime clock, in order; an
        # open window ends at _FOREVER. Always-on until start() says otherwise.
        self._windows: list[list[int]] = [[-_FOREVER, _FOREVER]]
        self.path = path
        self.speed = speed
        self.repeat = repeat
        self.stretch = stretch
        self.origin_ns = origin_ns
        self._t0 = 0  # host realtime of replayed time 0, fixed by start()
        self._timing = ReplayTiming(0, repeat, speed, stretch)
        self._per_block = 1
        self._step_offsets: list[int] = []  # the trace's step starts, stretched
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._cut = False  # set by stop(): hand nothing more to the sink
        self._wake = threading.Event()  # interrupts a pacing wait when cut
        self._handed = 0  # records passed to sink.submit so far
        self._total = 0
        self._reported = False
        self._sink: Sink | None = None

    # -- Source protocol -------------------------------------------------------------

    def start(self, sink: Sink, capturing: bool = True) -> None:
        if not capturing:
            with self._lock:
                self._windows = []
        try:
            trace = load_trace(self.path)
        except TraceFormatError as exc:
            raise SourceUnavailable(f"replay: {exc}") from None
        except OSError as exc:
            raise SourceUnavailable(
                f"replay: cannot read {self.path}: {exc.strerror or exc}"
            ) from None
        names = array.array("q", [sink.intern(text) for text in trace.names])
        sink.add_devices(replay_devices(trace))
        self._timing = ReplayTiming(trace.span_ns, self.repeat, self.speed, self.stretch)
        self._per_block = loops_per_block(len(trace), self.repeat)
        self._step_offsets = sorted(self._timing.scaled(t) for t in step_starts(trace))
        self._t0 = clock.now_ns() if self.origin_ns is None else self.origin_ns
        stacks = self._stacks(sink, trace)
        thread = threading.Thread(
            target=self._run, args=(sink, trace, names, stacks), name="tfprof-replay",
            daemon=True,
        )  # fmt: skip
        # Published only once started, under the lock stop() reads them under: a stop()
        # from another thread never joins a thread that has not started.
        with self._lock:
            self._total = len(trace) * self.repeat
            self._sink = sink
            thread.start()
            self._thread = thread

    def _stacks(self, sink: Sink, trace: RecordedTrace) -> StackReplay | None:
        """The trace's Python stacks, when it has some and the process takes them."""
        stack_sink = sink.stack_sink()
        if trace.stacks is None or stack_sink is None or not len(trace.stacks):
            return None
        return StackReplay(stack_sink, trace.stacks, trace.names)

    def tracer_clock_ns(self) -> int | None:
        return None  # timestamps are already host realtime

    @property
    def has_steps(self) -> bool:
        """Whether the trace has step ranges (known once ``start`` has read it)."""
        return bool(self._step_offsets)

    def step_boundaries(self, after_ns: int) -> tuple[int, Iterator[int]]:
        """The step period, and the replayed step starts at or after ``after_ns`` (host
        realtime) in order, over every loop still to come (capture by steps)."""
        timing, offsets, t0 = self._timing, self._step_offsets, self._t0
        period = median_gap(timing.at(0, o, self._per_block) for o in offsets)

        def starts() -> Iterator[int]:
            if not offsets:
                return
            first = max(0, (after_ns - t0) // timing.period_ns - 1)
            for loop in range(first, timing.repeat):
                for o in offsets:
                    t = t0 + timing.at(loop, o, self._per_block)
                    if t >= after_ns:
                        yield t

        return period, starts()

    def set_capturing(self, on: bool, at_ns: int) -> None:
        with self._lock:
            windows = self._windows
            is_open = bool(windows) and windows[-1][1] == _FOREVER
            if on and not is_open:
                windows.append([at_ns, _FOREVER])
            elif not on and is_open:
                windows[-1][1] = max(windows[-1][0], at_ns)

    def _kept(self, starts: array.array[int]) -> list[tuple[int, int]]:
        """The [lo, hi) index ranges of sorted ``starts`` inside a capture window."""
        first, last = starts[0], starts[-1]
        with self._lock:
            windows = [(a, b) for a, b in self._windows if a <= last and b > first]
        if len(windows) == 1 and windows[0][0] <= first and windows[0][1] > last:
            return [(0, len(starts))]  # all (always the case in the always mode)
        edges = [(bisect.bisect_left(starts, a), bisect.bisect_left(starts, b)) for a, b in windows]
        return [(lo, hi) for lo, hi in edges if hi > lo]

    def _captured(self, columns: list[array.array[int]]) -> list[array.array[int]] | None:
        """The records of a chunk whose start falls inside a capture window (starts are
        sorted); None when there are none."""
        ranges = self._kept(columns[START_COL])
        if not ranges:
            return None
        if ranges == [(0, len(columns[START_COL]))]:
            return columns
        out = []
        for col in columns:
            kept = array.array("q")
            for lo, hi in ranges:
                kept.extend(col[lo:hi])
            out.append(kept)
        return out

    def stop(self, deadline: float) -> None:
        with self._lock:
            thread, sink = self._thread, self._sink
        if thread is None or sink is None:
            return
        thread.join(max(0.0, deadline - time.monotonic()))
        if not thread.is_alive():
            return
        with self._lock:
            self._cut = True
            left = self._total - self._handed
        self._wake.set()
        self._report(
            sink.warn, f"replay cut short at exit: {left} of {self._total} records not replayed"
        )

    # -- the replay thread -----------------------------------------------------------

    def _report(self, warn: Callable[[str], None], message: str) -> None:
        with self._lock:
            if self._reported:
                return
            self._reported = True
        # The sink's own failure must not reach the caller either.
        with contextlib.suppress(Exception):
            warn(message)

    def _run(
        self, sink: Sink, trace: RecordedTrace, names: array.array[int],
        stacks: StackReplay | None,
    ) -> None:  # fmt: skip
        try:
            # Built here, off the caller's thread: tiling a big trace takes a moment.
            self._replay(
                sink, ReplayPlan(trace, names, self._timing, self._per_block, self.speed), stacks
            )
        except Exception as exc:
            with self._lock:
                left = self._total - self._handed
            self._report(
                sink.warn,
                f"replay stopped by an error ({type(exc).__name__}: {exc});"
                f" {left} of {self._total} records not replayed",
            )

    def _replay(self, sink: Sink, plan: ReplayPlan, stacks: StackReplay | None = None) -> None:
        t0 = self._t0  # on the host realtime clock, as CUPTI timestamps are
        # The monotonic instant of t0 (in the past when the run's origin is): pacing
        # keeps each record at or before the wall clock.
        m0 = time.monotonic_ns() - (clock.now_ns() - t0)
        speed = self.speed
        for loop_first, chunks in plan.blocks():
            start_shift = t0 + loop_first * plan.period_ns
            corr_shift = loop_first * plan.correlation_stride
            for chunk in chunks:
                if speed is not None:
                    due = m0 + (loop_first * plan.period_ns + chunk.due_ns) / speed
                    while (now := time.monotonic_ns()) < due and not self._cut:
                        self._wake.wait((due - now) / 1e9)
                columns = list(chunk.columns)
                columns[START_COL] = shift_starts(columns[START_COL], start_shift)
                if plan.has_correlation and corr_shift:
                    columns[CORRELATION_COL] = shift_correlations(
                        columns[CORRELATION_COL], corr_shift
                    )
                captured = self._captured(columns)
                with self._lock:
                    if self._cut:
                        return  # stop() has reported what is left
                    self._handed += chunk.size
                if captured is None:
                    continue  # outside every capture window: never traced
                try:
                    accepted = sink.submit(RecordTable(captured), wait=True)
                except Exception:
                    with self._lock:  # a batch the sink choked on was not replayed
                        self._handed -= chunk.size
                    raise
                if not accepted:
                    with self._lock:
                        left = self._total - self._handed
                    self._report(
                        sink.warn,
                        f"replay stopped: the hook no longer accepts records;"
                        f" {left} of {self._total} records not replayed",
                    )
                    return
            if stacks is not None:  # the block's loops' launch captures, moved alike
                for loop in range(loop_first, min(loop_first + self._per_block, self.repeat)):
                    place = functools.partial(self._place, loop)
                    stacks.send_loop(place, loop * plan.correlation_stride, self._kept)

    def _place(self, loop: int, offset: int) -> int:
        """Replayed time (host realtime) of what the trace recorded at ``offset``, in
        ``loop``: where that loop's records go."""
        timing = self._timing
        return self._t0 + timing.at(loop, timing.scaled(offset), self._per_block)
