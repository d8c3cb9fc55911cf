"""The in-process hook: runs inside every traced Python process.

Started by the bootstrap ``sitecustomize`` before user code. It arms one tracer source,
queues the source's record frames (bounded; when full it drops and counts instead of
blocking) and sends them from a daemon thread over the launcher's Unix socket. It never
raises into user code: every failure becomes one ``tfprof:`` line on stderr and the
process carries on untraced. Standard library only, until a source needs more.

If the launcher dies (SIGKILL), the job keeps running: the send to its socket fails,
the hook says so once, drops what it still holds and what the source traces from then
on, counts all of it (``undelivered``, ``dropped_queue``) and prints the count at exit,
since no launcher is left to carry it to the collector.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import os
import socket
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from tfprof.agent.inprocess import clock, config, frames, identity, tf_ops
from tfprof.agent.inprocess.capture_control import ALWAYS, CaptureController, CaptureSchedule
from tfprof.agent.inprocess.errors import ConfigError
from tfprof.agent.inprocess.frames import FrameType
from tfprof.agent.inprocess.sources.base import Source, SourceUnavailable
from tfprof.core.records import DeviceInfo, RecordTable

if TYPE_CHECKING:
    from tfprof.agent.inprocess.stacks.code_capture import CodeCapture, StackSink
    from tfprof.core.code_stacks import StackBatch
from tfprof.core.version import __version__

# A broken connection to the launcher must raise EPIPE in our thread, never SIGPIPE:
# a job that restored SIGPIPE's default action would be killed by it.
NO_SIGPIPE = getattr(socket, "MSG_NOSIGNAL", 0)

_hook: Hook | None = None
_warned: set[str] = set()
_warn_lock = threading.Lock()


def warn(message: str) -> None:
    """One line on stderr, once per message per process."""
    with _warn_lock:
        if message in _warned:
            return
        _warned.add(message)
    try:
        sys.stderr.write(f"tfprof: {message}\n")
        sys.stderr.flush()
    except Exception:
        pass


class FrameQueue:
    """Bounded by bytes; ``put`` never blocks unless asked to. Each frame carries the
    number of records in it, so frames that can no longer be sent are counted."""

    def __init__(self, max_bytes: int) -> None:
        self._frames: collections.deque[tuple[bytes, int]] = collections.deque()
        self._bytes = 0
        self._max = max_bytes
        self._cond = threading.Condition()
        self.closed = False

    def put(self, frame: bytes, wait: bool = False, force: bool = False, records: int = 0) -> bool:
        with self._cond:
            while not force and self._bytes + len(frame) > self._max and self._frames:
                if not wait or self.closed:
                    return False
                self._cond.wait(0.1)
            if self.closed and not force:
                return False
            self._frames.append((frame, records))
            self._bytes += len(frame)
            self._cond.notify_all()
            return True

    def take(self, timeout: float) -> tuple[bytes, int] | None:
        """The next frame and the records in it; None when there is none in time."""
        with self._cond:
            if not self._frames and not self.closed:
                self._cond.wait(timeout)
            if not self._frames:
                return None
            frame, records = self._frames.popleft()
            self._bytes -= len(frame)
            self._cond.notify_all()
            return frame, records

    def put_back(self, frame: bytes, records: int) -> None:
        """Return a taken frame to the front (its send broke off): it goes first on the
        next connection, even into a closed or full queue (it was counted in already)."""
        with self._cond:
            self._frames.appendleft((frame, records))
            self._bytes += len(frame)
            self._cond.notify_all()

    def get(self, timeout: float) -> bytes | None:
        taken = self.take(timeout)
        return None if taken is None else taken[0]

    def discard(self) -> int:
        """Close and empty the queue; the records the discarded frames held."""
        with self._cond:
            self.closed = True
            records = sum(n for _, n in self._frames)
            self._frames.clear()
            self._bytes = 0
            self._cond.notify_all()
            return records

    def close(self) -> None:
        with self._cond:
            self.closed = True
            self._cond.notify_all()

    def __len__(self) -> int:
        return len(self._frames)


def _argv() -> list[str]:
    # sys.argv is not set yet while sitecustomize runs; the kernel's copy always is.
    try:
        with open("/proc/self/cmdline", "rb") as f:
            parts = f.read().split(b"\0")
        return [p.decode(errors="replace") for p in parts if p]
    except OSError:
        return list(getattr(sys, "argv", []))


class Hook:
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

    @property
    def captures_windows(self) -> bool:
        """True when capture windows, not the process's lifetime, decide what is traced."""
        return self.source is not None and self.cfg.capture.kind != ALWAYS

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

    def _hello(self) -> dict[str, Any]:
        tracer_ns = None
        if self.source is not None:
            try:
                tracer_ns = self.source.tracer_clock_ns()
            except Exception:
                tracer_ns = None
        realtime = clock.now_ns()
        return {
            "pid": self.pid,
            "ppid": os.getppid(),
            "argv": _argv(),
            "task": self.cfg.task(self.pid),
            "source": self.source.name if self.source is not None else "none",
            # The relay sends capture windows only to a process that follows them.
            "capture": str(self.cfg.capture) if self.captures_windows else ALWAYS,
            "agent_version": __version__,
            "job": self.job,
            "run_id": self.run_id,
            "connection": self.connections,
            "records_base": self.records_handed,
            "dropped_base": self.dropped_handed,
            "clock": {
                "realtime_ns": realtime,
                "monotonic_ns": time.monotonic_ns(),
                "tracer_ns": tracer_ns or 0,
            },
        }

    def _connect(self) -> socket.socket | None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(self.cfg.socket)
        except OSError as exc:
            sock.close()
            warn(f"cannot reach the tfprof launcher at {self.cfg.socket} ({exc}); not traced")
            return None
        return sock

    def _send_loop(self) -> None:
        if self.cfg.via_daemon:
            self._send_loop_via_daemon()
            return
        sock = self._connect()
        if sock is None:
            self._fail()
            return
        self._sock = sock
        sending = 0  # records of the frame being sent, lost if the send fails
        try:
            sock.sendall(frames.encode_json_frame(FrameType.HELLO, self._hello()), NO_SIGPIPE)
            if self.captures_windows:
                self._start_capture(sock)
            while True:
                taken = self.queue.take(timeout=0.5)
                if taken is None:
                    if self.queue.closed:
                        break
                    continue
                frame, sending = taken
                sock.sendall(frame, NO_SIGPIPE)
                sending = 0
        except OSError as exc:
            # The launcher is gone (killed, crashed): the job goes on untraced, and what
            # this process traced from here on is counted, not silently lost.
            self._launcher_lost = exc.strerror or str(exc)
            warn(
                f"lost the connection to the tfprof launcher ({self._launcher_lost}); "
                "GPU records of this process are dropped from now on (counted at exit)"
            )
            self._fail(sending)
        finally:
            try:
                sock.close()
            except OSError:
                pass
            self._delivered.set()

    def _send_loop_via_daemon(self) -> None:
        """Through a node daemon, which may restart (an upgrade, a crash): connect again
        with backoff, each connection a new stream; frames wait in the bounded queue
        meanwhile (a full queue drops and counts, as always)."""
        backoff = 0.1
        try:
            while True:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    sock.connect(self.cfg.socket)
                except OSError as exc:
                    sock.close()
                    if self.connections == 0:
                        warn(f"cannot reach the tfprof daemon at {self.cfg.socket} "
                             f"({exc.strerror or exc}); records wait until it answers")  # fmt: skip
                    time.sleep(backoff)
                    backoff = min(backoff * 2, 2.0)
                    continue
                backoff = 0.1
                if self._serve_daemon(sock):
                    return
        finally:
            self._delivered.set()

    def _serve_daemon(self, sock: socket.socket) -> bool:
        """One connection; True once the queue is closed and sent, False if it broke.

        The frame whose send broke off goes again, whole, first on the next connection:
        the daemon never relays a frame it did not read to its end, and a stopping
        daemon (SIGTERM) reads every byte written before the break, relays it and ends
        that stream with a goodbye. So each record is stored once, and a goodbye (with
        the drop counts it carries) is never lost. (A SIGKILLed daemon loses what it had
        read and not yet delivered; no hook can know that.)"""
        self.connections += 1
        self._sock = sock
        taken: tuple[bytes, int] | None = None
        try:
            sock.sendall(frames.encode_json_frame(FrameType.HELLO, self._hello()), NO_SIGPIPE)
            if self.captures_windows:  # windows come down this connection now
                if self._capture is None:
                    self._start_capture(sock)
                else:
                    self._capture.attach(sock)
            names = self.strings.sent() if self.connections > 1 else []
            if names:  # the new stream needs the names earlier streams carried
                for refresh, _ in frames.encode_records_frames(RecordTable(), 1, names, 0):
                    sock.sendall(refresh, NO_SIGPIPE)
                if self.code is not None:  # and the stacks named so far
                    stacks = frames.encode_stacks_frame(self.code.sent_batch(), 1, [])
                    sock.sendall(stacks, NO_SIGPIPE)
            while True:
                taken = self.queue.take(timeout=0.5)
                if taken is None:
                    if self.queue.closed:
                        return True
                    continue
                frame, sending = taken
                sock.sendall(frame, NO_SIGPIPE)
                taken = None
                self.records_handed += sending
                if frame[0] == FrameType.RECORDS:
                    dropped = frames.RECORDS_HEADER.unpack_from(frame, frames.HEADER.size)[0]
                    self.dropped_handed = max(self.dropped_handed, dropped)
        except OSError as exc:
            warn(f"lost the connection to the tfprof daemon ({exc.strerror or exc}); "
                 "reconnecting (records wait in the bounded queue)")  # fmt: skip
            if taken is not None:
                self.queue.put_back(*taken)
            return False
        finally:
            self._sock = None
            try:
                sock.close()
            except OSError:
                pass

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

    def _fail(self, in_flight: int = 0) -> None:
        lost = self.queue.discard() + in_flight
        with self._count_lock:
            self.undelivered += lost
        self._delivered.set()

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


def _identity(cfg: config.AgentConfig) -> tuple[str, str]:
    """(job name, run id): the launcher's, else worked out here (identity.resolve)."""
    if not cfg.via_daemon:
        return cfg.job, cfg.run_id
    scheduler = (
        identity.SchedulerJob(cfg.scheduler_job, cfg.scheduler_key) if cfg.scheduler_key else None
    )
    job, run_id = identity.resolve(cfg.job, cfg.run_id, scheduler, _argv())
    config.export_identity(job, run_id)  # children (torchrun's ranks) join this run
    return job, run_id


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


def _pick_source(cfg: config.AgentConfig, run_id: str = "") -> Source | None:
    if cfg.source in ("none", "auto"):
        # The launcher resolves "auto" before starting the job; keep the job safe anyway.
        return None
    if cfg.source == "cupti":
        from tfprof.agent.inprocess.sources.cupti import CuptiSource

        return CuptiSource(
            buffer_bytes=cfg.cupti_buffer_bytes,
            flush_period_ms=cfg.cupti_flush_ms,
            launcher_cupti=(cfg.cupti_path, cfg.cupti_abi),
            api=cfg.api,
            markers=cfg.nvtx,
            memory=cfg.memory,
            launcher_nvtx=cfg.nvtx_injection,
            finalize_after_window=cfg.capture_finalize,
        )
    path = cfg.replay_path
    if path is not None:
        # Replay runs once per job, in the first traced process to claim it; or, in a
        # process that has a rank, once per rank, every rank from the run's one origin.
        if not cfg.via_daemon:
            folder, prefix = cfg.run_dir or os.path.dirname(cfg.socket), "replay"
        else:  # through a node daemon: once per run, on this host
            import tempfile

            folder, prefix = tempfile.gettempdir(), f"tfprof-replay-{run_id}"
        rank = f".rank-{cfg.rank}" if cfg.rank else ""
        if not _claim(os.path.join(folder, f"{prefix}{rank}.claimed")):
            return None
        origin = _run_origin(os.path.join(folder, f"{prefix}.origin")) if cfg.rank else None
        from tfprof.agent.inprocess.sources.replay import ReplaySource

        return ReplaySource(
            path,
            speed=cfg.replay_speed,
            repeat=cfg.replay_repeat,
            stretch=cfg.replay_stretch,
            origin_ns=origin,
        )
    return None


def _claim(path: str) -> bool:
    """Whether this process is the first to create ``path`` (it then holds its pid)."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return False
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    return True


def _run_origin(path: str) -> int:
    """The replay origin every rank of the run shares: the first rank to ask writes its
    present instant to ``path`` (whole, then linked into place, so no rank reads half of
    it); the others read it."""
    mine = clock.now_ns()
    draft = f"{path}.{os.getpid()}"
    try:
        with open(draft, "w") as f:
            f.write(str(mine))
        try:
            os.link(draft, path)
        except FileExistsError:
            pass
    finally:
        with contextlib.suppress(OSError):
            os.unlink(draft)
    with open(path) as f:
        return int(f.read().strip())


def _after_fork_child() -> None:
    global _hook, _warn_lock
    _warn_lock = threading.Lock()  # another thread may have held it at fork time
    try:
        if _hook is not None:
            _hook = _hook.after_fork_child()
            _register_multiprocessing_finalizer()
    except Exception as exc:
        warn(f"could not trace a forked child ({type(exc).__name__}: {exc})")


def _register_multiprocessing_finalizer() -> None:
    # multiprocessing's fork workers leave through os._exit(), which skips atexit, and
    # clear multiprocessing's own finalizers on start; threading's exit hooks still run
    # (BaseProcess._bootstrap calls threading._shutdown), so deliver from there.
    register = getattr(threading, "_register_atexit", None)
    if register is not None:
        try:
            register(_shutdown)
        except RuntimeError:  # interpreter already shutting down
            pass


def _shutdown() -> None:
    try:
        if _hook is not None and _hook.pid == os.getpid():
            _hook.shutdown()
    except Exception as exc:
        warn(f"failed at exit ({type(exc).__name__}: {exc})")


def _watch_torch() -> None:
    try:
        from tfprof.agent.inprocess import torch_ops

        torch_ops.install(warn)
    except Exception as exc:
        warn(f"could not watch for PyTorch ({type(exc).__name__}: {exc})")


def _step_boundary(t_ns: int) -> None:
    hook = _hook  # the current process's (a forked child has its own)
    if hook is not None:
        hook.step_boundary(t_ns)


def _add_step(number: int, start_ns: int, end_ns: int, thread: int, marker: str) -> None:
    hook = _hook
    if hook is not None:
        hook.add_step(number, start_ns, end_ns, thread, marker)


def _mark_steps() -> None:
    try:
        from tfprof.agent.inprocess import step_markers

        step_markers.install(_step_boundary, _add_step, warn)
    except Exception as exc:
        warn(f"cannot mark training steps ({type(exc).__name__}: {exc})")


def start() -> None:
    """Entry point for the bootstrap; safe to call twice, never raises."""
    global _hook
    if _hook is not None:
        return
    try:
        cfg = config.load()
    except ConfigError as exc:
        warn(f"{exc}; this process is not traced")
        return
    if not cfg.socket:
        return  # not started by tfprof-agent run
    clock.set_skew(cfg.clock_skew_ns)
    job = _identity(cfg)
    try:
        source = _pick_source(cfg, job[1])
    except Exception as exc:
        warn(f"cannot set up the tracer source ({type(exc).__name__}: {exc})")
        source = None
    _hook = Hook(cfg, source, job)
    _hook.start()
    if cfg.torch_ops and cfg.nvtx and _hook.source is not None and cfg.source == "cupti":
        _watch_torch()
    if cfg.tf_ops:
        tf_ops.install(_hook, cfg.run_dir)
    if cfg.steps:
        _mark_steps()
    atexit.register(_shutdown)
    os.register_at_fork(after_in_child=_after_fork_child)
