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

Cost: the chunk tables are built once per trace (short traces are tiled several loops
per block so batches stay large); each loop then only rebuilds the start and
correlation columns.
"""

from __future__ import annotations

import array
import bisect
import contextlib
import functools
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from tfprof.agent.inprocess import clock
from tfprof.agent.inprocess.sources.base import Sink, SourceUnavailable
from tfprof.agent.inprocess.sources.replay_stacks import StackReplay
from tfprof.agent.inprocess.step_capture import median_gap
from tfprof.core.records import COLUMNS, DeviceInfo, RecordKind, RecordTable
from tfprof.readers import RecordedTrace, TraceFormatError, load_trace
from tfprof.readers.load import looks_like_json_trace

CHUNK_RECORDS = 8192
PACE_WINDOW_S = 0.01
LOOP_GAP_NS = 1_000_000
CAPTURE_LEAD_NS = 500_000_000
_FOREVER = 1 << 63
_CORRELATION_MOD = (1 << 32) - 1  # correlation is uint32 on the wire; ids 1 .. 2**32-1
_STEP_NAME = re.compile(r"ProfilerStep#\d+")


_numpy_module: Any = False  # False: not looked for yet; None: not installed


def _numpy() -> Any:
    """numpy if installed, imported on first use by the replay thread, not at import
    time: this module loads inside the user's process at start-up, and numpy's import is
    the slowest of ours (bench/results/cpu-design-choices.txt)."""
    global _numpy_module
    if _numpy_module is False:
        try:
            import numpy
        except ImportError:  # pragma: no cover - a dependency, but the hook must not need it
            _numpy_module = None
        else:
            _numpy_module = numpy
    return _numpy_module


def _shift_starts(col: array.array[int], shift: int) -> array.array[int]:
    np = _numpy() if len(col) > 64 else None
    if np is not None:
        return array.array("q", (np.frombuffer(col, dtype=np.int64) + shift).tobytes())
    return array.array("q", [v + shift for v in col])


def _shift_correlations(col: array.array[int], shift: int) -> array.array[int]:
    # Wrap within 1 .. 2**32-1 so a long replay never emits 0 ("no correlation").
    np = _numpy() if len(col) > 64 else None
    if np is not None:
        c = np.frombuffer(col, dtype=np.int64)
        out = np.where(c != 0, (c - 1 + shift) % _CORRELATION_MOD + 1, 0).astype(np.int64)
        return array.array("q", out.tobytes())
    return array.array("q", [(c - 1 + shift) % _CORRELATION_MOD + 1 if c else 0 for c in col])


def check_replay_trace(path: str) -> None:
    """Raise ``UsageError`` (one line) unless ``path`` looks like a trace replay can read.

    Reads only the file's start (gzip magic, then the first bytes of JSON), so it stays
    cheap for big traces; the launcher calls it before the job starts.
    """
    from tfprof.agent.inprocess.errors import UsageError

    if not os.path.isfile(path):
        raise UsageError(f"replay trace not found: {path}")
    try:
        readable = looks_like_json_trace(path)
    except OSError as exc:
        raise UsageError(f"replay trace {path}: cannot read it ({exc.strerror or exc})") from None
    except TraceFormatError as exc:
        raise UsageError(f"replay trace {exc}") from None
    if not readable:
        raise UsageError(
            f"replay trace {path}: not a trace replay can read (Chrome, TF timeline or "
            "Kineto JSON, gzip or not)"
        )


class _Chunk:
    """One batch of a block: every column but start and correlation is final."""

    __slots__ = ("columns", "due_ns", "size")

    def __init__(self, columns: list[array.array[int]], due_ns: int) -> None:
        self.columns = columns
        self.due_ns = due_ns  # offset (within the block) of its last record
        self.size = len(columns[0])


_START = COLUMNS.index("start_ns")
_DURATION = COLUMNS.index("duration_ns")
_CORRELATION = COLUMNS.index("correlation")


class _Timing:
    """Where a record of the trace lands: its offset stretched, loops one period apart,
    and (at max speed with repeats) time compressed N-fold, as ``_Plan`` lays them out."""

    def __init__(self, span_ns: int, repeat: int, speed: float | None, stretch: float) -> None:
        self.stretch = stretch
        self.compression = repeat if speed is None else 1
        self.raw_period_ns = self.scaled(span_ns) + LOOP_GAP_NS  # one loop, uncompressed
        self.period_ns = -(-self.raw_period_ns // self.compression)  # rounded up
        self.repeat = repeat

    def scaled(self, ns: int) -> int:
        return ns if self.stretch == 1 else round(ns * self.stretch)

    def at(self, loop: int, offset: int, per_block: int) -> int:
        """Replayed time (from ``t0``) of a record at stretched ``offset`` in ``loop``
        (``per_block`` loops are tiled per block, as ``_Plan`` does)."""
        within = loop % per_block * self.raw_period_ns + offset
        return loop // per_block * per_block * self.period_ns + within // self.compression


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
        self._timing = _Timing(0, repeat, speed, stretch)
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
        sink.add_devices(_devices(trace))
        self._timing = _Timing(trace.span_ns, self.repeat, self.speed, self.stretch)
        self._per_block = _loops_per_block(len(trace), self.repeat)
        self._step_offsets = sorted(self._timing.scaled(t) for t in _step_starts(trace))
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
        ranges = self._kept(columns[_START])
        if not ranges:
            return None
        if ranges == [(0, len(columns[_START]))]:
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
                sink, _Plan(trace, names, self._timing, self._per_block, self.speed), stacks
            )
        except Exception as exc:
            with self._lock:
                left = self._total - self._handed
            self._report(
                sink.warn,
                f"replay stopped by an error ({type(exc).__name__}: {exc});"
                f" {left} of {self._total} records not replayed",
            )

    def _replay(self, sink: Sink, plan: _Plan, stacks: StackReplay | None = None) -> None:
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
                columns[_START] = _shift_starts(columns[_START], start_shift)
                if plan.has_correlation and corr_shift:
                    columns[_CORRELATION] = _shift_correlations(columns[_CORRELATION], corr_shift)
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


class _Plan:
    """Chunk tables for one block of ``loops_per_block`` back-to-back loops, built once."""

    def __init__(
        self,
        trace: RecordedTrace,
        names: array.array[int],
        timing: _Timing,
        loops_per_block: int,
        speed: float | None,
    ) -> None:
        n = len(trace)
        repeat = self.repeat = timing.repeat
        # Time compression at max with repeats (see the module docstring).
        self.compression = timing.compression
        self.period_ns = timing.raw_period_ns
        correlation = trace.column("correlation")
        self.has_correlation = any(correlation)
        self.correlation_stride = max(correlation, default=0)
        # Tile short traces so a batch carries ~CHUNK_RECORDS records, not one loop's few.
        self.loops_per_block = loops_per_block
        k = self.loops_per_block
        block: list[array.array[int]] = []
        for col_name in COLUMNS:
            base = trace.column(col_name)
            if col_name == "name":
                base = array.array("q", [names[i] for i in base])
            elif col_name == "category":  # a MARKER's category is a string too
                kinds = trace.column("kind")
                base = array.array(
                    "q", [names[c] if k == RecordKind.MARKER else c for k, c in zip(kinds, base)]
                )
            elif col_name == "collective":  # and so is a collective's description
                base = array.array("q", [names[c] if c else 0 for c in base])
            elif col_name in ("start_ns", "duration_ns") and timing.stretch != 1:
                base = array.array("q", [timing.scaled(v) for v in base])
            if col_name == "start_ns":
                tiled = array.array("q")
                for j in range(k):
                    tiled.extend(_shift_starts(base, j * self.period_ns))
            elif col_name == "correlation" and self.has_correlation:
                tiled = array.array("q", base)
                for j in range(1, k):
                    tiled.extend(_shift_correlations(base, j * self.correlation_stride))
            else:
                tiled = base * k
            block.append(tiled)
        if self.compression > 1:
            c = self.compression
            block[_START] = array.array("q", [v // c for v in block[_START]])
            # A record keeps at least 1 ns: a zero duration would read as an instant.
            block[_DURATION] = array.array(
                "q", [max(1, v // c) if v else 0 for v in block[_DURATION]]
            )
            self.period_ns = timing.period_ns  # rounded up: loops never overlap
        window_ns = None if speed is None else int(PACE_WINDOW_S * 1e9 * speed)
        self._full = _chunks(block, len(block[0]), window_ns)
        rest = repeat % k
        self._partial = _chunks(block, rest * n, window_ns) if rest else []

    def blocks(self) -> Iterator[tuple[int, list[_Chunk]]]:
        """(index of the block's first loop, its chunks) for every block, in order."""
        k = self.loops_per_block
        full_blocks = self.repeat // k
        for b in range(full_blocks):
            yield b * k, self._full
        if self._partial:
            yield full_blocks * k, self._partial


def _chunks(block: list[array.array[int]], limit: int, window_ns: int | None) -> list[_Chunk]:
    """Split the first ``limit`` records of a block into batches by count and trace time."""
    starts = block[_START]
    chunks: list[_Chunk] = []
    lo = 0
    while lo < limit:
        hi = min(limit, lo + CHUNK_RECORDS)
        if window_ns is not None:
            edge = starts[lo] + window_ns
            for i in range(lo + 1, hi):  # starts are sorted
                if starts[i] >= edge:
                    hi = i
                    break
        chunks.append(_Chunk([col[lo:hi] for col in block], starts[hi - 1]))
        lo = hi
    return chunks


def _loops_per_block(records: int, repeat: int) -> int:
    return max(1, min(repeat, CHUNK_RECORDS // max(1, records)))


def _step_starts(trace: RecordedTrace) -> list[int]:
    """Starts of the trace's host step ranges (``ProfilerStep#N`` on a host thread)."""
    kinds, names, threads = trace.column("kind"), trace.column("name"), trace.column("thread")
    steps = {i for i, text in enumerate(trace.names) if _STEP_NAME.fullmatch(text)}
    if not steps:
        return []
    starts = trace.column("start_ns")
    return [
        starts[i]
        for i in range(len(trace))
        if kinds[i] == RecordKind.MARKER and names[i] in steps and threads[i]
    ]


def _devices(trace: RecordedTrace) -> list[DeviceInfo]:
    # Deterministic per host and ordinal: two jobs replaying on one host share "a GPU",
    # which is what the contention view groups by.
    host = socket.gethostname()
    devices: list[DeviceInfo] = []
    for recorded in trace.devices:
        info = recorded.copy()  # a DeviceInfo still; the trace's own stays untouched
        ordinal = recorded["ordinal"]
        info["uuid"] = f"GPU-replay-{host}-{ordinal}"
        info.setdefault("name", "replayed GPU")
        devices.append(info)
    return devices
