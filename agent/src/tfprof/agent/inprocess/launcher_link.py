"""The hook's link to the relay: the hello, and the send loops to a launcher or a daemon.

A mixin of ``process_hook.Hook``: it sends what the hook queued, over the launcher's Unix
socket or a node daemon's (reconnecting when the daemon restarts), and counts what a lost
launcher leaves undelivered.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from tfprof.agent.inprocess import clock, config, frames
from tfprof.agent.inprocess.capture_control import ALWAYS, CaptureController
from tfprof.agent.inprocess.frame_queue import FrameQueue
from tfprof.agent.inprocess.frames import FrameType
from tfprof.agent.inprocess.notices import warn
from tfprof.agent.inprocess.sources.base import Source
from tfprof.core.records import RecordTable
from tfprof.core.version import __version__

if TYPE_CHECKING:
    from tfprof.agent.inprocess.stacks.code_capture import CodeCapture

# A broken connection to the launcher must raise EPIPE in our thread, never SIGPIPE:
# a job that restored SIGPIPE's default action would be killed by it.
NO_SIGPIPE = getattr(socket, "MSG_NOSIGNAL", 0)


def process_argv() -> list[str]:
    # sys.argv is not set yet while sitecustomize runs; the kernel's copy always is.
    try:
        with open("/proc/self/cmdline", "rb") as f:
            parts = f.read().split(b"\0")
        return [p.decode(errors="replace") for p in parts if p]
    except OSError:
        return list(getattr(sys, "argv", []))


class LauncherLink:
    """The sending half of the hook; ``Hook`` holds the state it declares here."""

    cfg: config.AgentConfig
    job: str
    run_id: str
    pid: int
    queue: FrameQueue
    strings: frames.StringTable
    source: Source | None
    code: CodeCapture | None
    undelivered: int
    connections: int
    records_handed: int
    dropped_handed: int
    _launcher_lost: str | None
    _count_lock: threading.Lock
    _sock: socket.socket | None
    _delivered: threading.Event
    _capture: CaptureController | None

    @property
    def captures_windows(self) -> bool:
        """True when capture windows, not the process's lifetime, decide what is traced."""
        return self.source is not None and self.cfg.capture.kind != ALWAYS

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
            "argv": process_argv(),
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
        raise NotImplementedError  # the hook's: it owns the capture windows

    def _fail(self, in_flight: int = 0) -> None:
        lost = self.queue.discard() + in_flight
        with self._count_lock:
            self.undelivered += lost
        self._delivered.set()
