"""The hook's per-process state: the queue, the string table, the source and its lifecycle.

``Hook`` is the sink a source writes into (records, stacks, devices, drop counts), opens
and closes capture windows, and at exit flushes the source, says goodbye and waits for
delivery within the exit timeout. Sending is its ``LauncherLink`` half.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import TYPE_CHECKING

from tfprof.agent.inprocess import clock, config, frames, tf_ops
from tfprof.agent.inprocess.capture_control import ALWAYS, CaptureController, CaptureSchedule
from tfprof.agent.inprocess.frame_queue import FrameQueue
from tfprof.agent.inprocess.frames import FrameType
from tfprof.agent.inprocess.launcher_link import LauncherLink
from tfprof.agent.inprocess.notices import warn
from tfprof.agent.inprocess.sources.base import Source, SourceUnavailable
from tfprof.core.records import DeviceInfo, RecordTable

if TYPE_CHECKING:
    from tfprof.agent.inprocess.stacks.code_capture import CodeCapture, StackSink
    from tfprof.core.code_stacks import StackBatch


class Hook(LauncherLink):
    """Per-process state: the queue, the string table, the sender and the source."""

    def __init__(
        self, cfg: config.AgentConfig, source: Source | None, job: tuple[str, str] = ("", "")
    ) -> None:
        self.cfg = cfg
        self.job, self.run_id = job  # (job name, run id) when no launcher names them
        self.pid = os.getpid()
        self.queue = FrameQueue(cfg.queue_bytes)
        self.strings = frames.StringTable()
        self.source = source
        self.records_sent = 0
        self.dropped_queue = 0
        self.dropped_tracer = 0
        # Records handed over but never delivered because the launcher went away (its
        # socket failed): nobody is left to store the count, so it is said on stderr.
        self.undelivered = 0
        self._launcher_lost: str | None = None
        self._count_lock = threading.Lock()
        self._submit_lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._sender: threading.Thread | None = None
        self._stopped = False
        self._delivered = threading.Event()
        # Through a node daemon: connections made so far (each one a stream), and the
        # records and drop count handed over on earlier ones (the daemon counts from there).
        self.connections = 0
        self.records_handed = 0
        self.dropped_handed = 0
        # Capture windows (on-demand, periodic modes): started once the socket is up.
        self._capture: CaptureController | None = None
        self._capture_lock = threading.Lock()
        # Python stacks (--code): started with the source, none without one.
        self.code: CodeCapture | None = None

    # -- Sink, for the source -------------------------------------------------------

    def intern(self, name: str) -> int:
        return self.strings.intern(name)

    def submit(self, table: RecordTable, wait: bool = False) -> bool:
        n = len(table)
        if n == 0:
            return True
        # One submit at a time: new names must reach the queue in the order the frames
        # that use them do (CUPTI's thread and an exit-time flush can both submit).
        # A table bigger than a frame may be (a full CUPTI buffer) goes as several.
        queued = 0
        with self._submit_lock:
            base, pending = self.strings.take_pending()
            for frame, records in frames.encode_records_frames(
                table, base, pending, self.dropped_queue
            ):
                if not self.queue.put(frame, wait=wait, records=records):
                    break
                queued += records
                pending = []  # the names are in a queued frame
            else:
                with self._count_lock:
                    self.records_sent += n
                return True
            if pending:  # the names travel with the next frame that does get through
                self.strings.restore_pending(base)
        with self._count_lock:
            self.records_sent += queued
            self.dropped_queue += n - queued
        if not wait and not self.queue.closed:  # closed: the failure was already reported
            warn("record queue full: dropping GPU records (counted in the trace metadata)")
        return False

    def submit_stacks(self, batch: StackBatch, wait: bool = False) -> bool:
        """Queue a stacks frame (new names first, as for records); False when dropped."""
        with self._submit_lock:
            base, pending = self.strings.take_pending()
            frame = frames.encode_stacks_frame(batch, base, pending)
            if self.queue.put(frame, wait=wait):
                return True
            self.strings.restore_pending(base)
        if not self.queue.closed:
            warn("record queue full: dropping Python stack samples (counted in the lake)")
        return False

    def stack_sink(self) -> StackSink | None:
        """Where a source's recorded stacks go: the code capture, unless --code off."""
        return self.code

    def add_devices(self, devices: list[DeviceInfo]) -> None:
        self.queue.put(frames.encode_json_frame(FrameType.DEVICES, devices), force=True)

    def add_tracer_dropped(self, count: int) -> None:
        with self._count_lock:
            self.dropped_tracer += count

    def warn(self, message: str) -> None:
        warn(message)

    # -- training steps (step_markers) -------------------------------------------------

    def step_boundary(self, t_ns: int) -> None:
        """A step starts: capture by steps opens and closes its windows here."""
        capture = self._capture
        if capture is not None:
            capture.step_boundary(t_ns)

    def add_step(self, number: int, start_ns: int, end_ns: int, thread: int, marker: str) -> None:
        """A STEP record, unless capture windows decide and none holds the step's start."""
        if self.cfg.capture.kind != ALWAYS:
            capture = self._capture
            if capture is None or not capture.schedule.covers(start_ns):
                return
        table = RecordTable()
        table.add_step(
            start_ns=start_ns, end_ns=end_ns, thread=thread, step=number, name=self.intern(marker)
        )
        self.submit(table)

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> None:
        if self.source is not None:
            self.code = _code_capture(self)
            try:
                self.source.start(self, capturing=self.cfg.capture.kind == ALWAYS)
            except SourceUnavailable as exc:
                warn(f"{exc} - GPU activity of this process is not traced")
                self.source = None
            except Exception as exc:  # a bug of ours must not stop the job
                warn(f"tracer source failed to start ({type(exc).__name__}: {exc})")
                self.source = None
        if self.code is not None:
            if self.source is None:
                self.code = None
            else:
                cupti = getattr(self.source, "cupti_module", None)
                self.code.start(self.cfg.capture.kind == ALWAYS, cupti)
        self._sender = threading.Thread(target=self._send_loop, name="tfprof-sender", daemon=True)
        self._sender.start()

    def _start_capture(self, sock: socket.socket) -> None:
        """One small daemon thread switches the source at the windows' edges and reads
        the windows the launcher sends down ``sock``; the training thread never waits."""
        source = self.source
        assert source is not None
        with self._capture_lock:
            if self._stopped:
                return
            schedule = CaptureSchedule(self.cfg.capture, clock.now_ns())
            self._capture = CaptureController(
                schedule,
                self._set_capturing,
                lead_ns=source.capture_lead_ns,
                on_error=lambda exc: warn(f"capture window failed ({type(exc).__name__}: {exc})"),
                # A replay of a trace with steps (ProfilerStep ranges) knows them ahead;
                # otherwise the step markers report them as they happen.
                known_boundaries=(
                    getattr(source, "step_boundaries", None)
                    if getattr(source, "has_steps", False)
                    else None
                ),
            )
            self._capture.start(sock)

    def _set_capturing(self, on: bool, at_ns: int) -> None:
        """Switch the source (and the stack sampler) at a window's edge, and tell the
        collector (a WINDOW frame, in order with the records): what was traced is then
        known, not guessed."""
        # Stacks inside the source's window: CUPTI attaches first and detaches last.
        assert self.source is not None
        if on:
            self.source.set_capturing(on, at_ns)
        if self.code is not None:
            self.code.set_capturing(on)
        if not on:
            self.source.set_capturing(on, at_ns)
        edge = frames.encode_json_frame(FrameType.WINDOW, {"on": on, "at_ns": at_ns})
        self.queue.put(edge, force=True)

    def _stop_capture(self) -> None:
        with self._capture_lock:
            capture, self._capture = self._capture, None
        if capture is not None:
            capture.stop(timeout=1.0)

    def shutdown(self) -> None:
        """At exit: flush the source, say goodbye, deliver within the exit timeout."""
        if self._stopped:
            return
        with self._capture_lock:
            self._stopped = True
        self._stop_capture()  # windows end with the process; stop() flushes what they hold
        deadline = time.monotonic() + self.cfg.exit_timeout_s
        # The sources may use most of the budget, not all: delivery needs some too.
        reserve = min(2.0, self.cfg.exit_timeout_s / 2)
        tf_ops.stop(deadline - reserve)  # TensorFlow op names, when a tracer runs
        if self.source is not None:
            try:
                self.source.stop(deadline - reserve)
            except Exception as exc:
                warn(f"tracer source failed to stop cleanly ({type(exc).__name__}: {exc})")
        if self.code is not None:  # after the source: a replay hands over its stacks
            try:
                self.code.stop(deadline - reserve - time.monotonic())
            except Exception as exc:
                warn(f"Python stacks failed to stop cleanly ({type(exc).__name__}: {exc})")
        goodbye = {
            "records_sent": self.records_sent,
            "dropped_queue": self.dropped_queue,
            "dropped_tracer": self.dropped_tracer,
            "dropped_stack_samples": self.code.buffer.dropped if self.code is not None else 0,
        }
        self.queue.put(frames.encode_json_frame(FrameType.GOODBYE, goodbye), force=True)
        self.queue.close()
        wait_s = max(0.0, deadline - time.monotonic())
        if self.cfg.via_daemon and self._sock is None:
            # No daemon right now: a job never waits long at exit for one to come back.
            wait_s = min(wait_s, 3.0 if self.connections else 0.5)
        if not self._delivered.wait(wait_s):
            left = len(self.queue)
            if self.cfg.via_daemon:
                lost = self.queue.discard()
                warn(f"{lost:,} GPU records of this process were not delivered: no tfprof "
                     f"daemon took them at {self.cfg.socket} by the exit timeout")  # fmt: skip
                return
            warn(f"gave up delivering {left} frames of GPU records at exit (TFPROF_EXIT_TIMEOUT)")
        if self._launcher_lost is not None:
            with self._count_lock:
                lost = self.undelivered + self.dropped_queue
                handed = self.records_sent - self.undelivered
            # What the launcher had received is stored only as far as it delivered it
            # before it died; the collector's count of the stream says how far.
            warn(f"{lost:,} GPU records of this process were not delivered: the tfprof "
                 f"launcher went away ({self._launcher_lost}) after {handed:,} were "
                 "handed to it")  # fmt: skip

    def after_fork_child(self) -> Hook:
        """A forked child keeps nothing of the parent's sender; it starts its own.

        CUDA does not survive fork and a replay runs once per job (or rank), so the child
        traces no GPU activity of its own but still says hello (for host metrics and
        identity).
        """
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
        child = Hook(self.cfg, source=None, job=(self.job, self.run_id))
        child.start()
        return child


def _code_capture(hook: Hook) -> CodeCapture | None:
    """The process's code capture (--code), None when off or when it cannot be made."""
    cfg = hook.cfg
    if cfg.code == "off":
        return None
    try:
        from tfprof.agent.inprocess.stacks.code_capture import CodeCapture

        return CodeCapture(hook, cfg.code, cfg.code_hz, cfg.code_launch_every, cfg.redact)
    except Exception as exc:  # a bug of ours must not stop the job
        warn(f"Python stacks are off ({type(exc).__name__}: {exc})")
        return None
