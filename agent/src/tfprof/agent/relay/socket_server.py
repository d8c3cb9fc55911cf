"""The relay's Unix socket: hook frames in, one ``ProcessLink`` per traced process.

A node daemon's socket is open to every user of the node (mode 0666), so nothing a
connection says is trusted before it is bounded: the kernel's peer credentials
(``SO_PEERCRED``) name the process and its uid, connections are capped in total and
per uid (``ConnectionLimits``), the hello must come first, within a deadline and within
``frames.MAX_HELLO_BYTES``, every later frame within ``frames.MAX_FRAME_BYTES``, and
payloads are read in chunks as their bytes arrive (never allocated at the length a
header claims). The accept loop outlives every error (a full descriptor table,
``EMFILE``, included): it backs off, sheds the connection it cannot serve, counts, and
says so at most once per interval.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any, NamedTuple

from tfprof.agent.inprocess import frames
from tfprof.agent.inprocess.frames import FrameType
from tfprof.agent.relay.process_end import ProcessWatch
from tfprof.agent.relay.process_link import ProcessLink
from tfprof.core.ratelimit import RateLimitedLog

log = logging.getLogger("tfprof.agent.relay.socket_server")

ACCEPTOR_JOIN_S = 5.0  # longest close() waits for the acceptor to hand over its last one
ACCEPT_BACKOFF_S = (0.01, 1.0)  # first and longest pause after a failed accept()
READ_CHUNK = 1 << 20  # payload bytes read (and allocated) at a time
# Payloads bigger than this are read while holding one of the uid's big-read slots, so
# one uid holds at most BIG_READS_PER_UID frames being read (16 MiB each at most).
BIG_READ_BYTES = 64 << 10
BIG_READS_PER_UID = 8


@dataclass(frozen=True)
class ConnectionLimits:
    """What one relay socket accepts. The defaults fit a node daemon: a job of 8 GPUs
    with dozens of data-loader workers per rank stays far below the per-uid cap, and the
    total leaves room for other users when one uid holds all it may."""

    max_connections: int = 2048
    max_per_uid: int = 512
    hello_timeout_s: float = 5.0


class PeerCredentials(NamedTuple):
    """The connected process as the kernel names it (0s when it cannot be told)."""

    pid: int
    uid: int
    gid: int


def peer_credentials(conn: socket.socket) -> PeerCredentials:
    """``SO_PEERCRED`` of a Unix socket: the pid as this process's pid namespace sees
    it (a pod's process reports its own namespace's), and its uid and gid."""
    try:
        raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except (OSError, AttributeError):
        return PeerCredentials(0, -1, -1)
    pid, uid, gid = struct.unpack("3i", raw)
    return PeerCredentials(pid, uid, gid)


def new_stream_id() -> str:
    return uuid.uuid4().hex


# The hello (its JSON fields, plus peer_pid, peer_uid, peer_gid from the kernel and
# peer_watch, the process as seen when it connected) -> the process's link, or None to
# refuse it (the connection is closed).
HelloHandler = Callable[[dict[str, Any]], ProcessLink | None]


class Refused(Exception):
    """A connection that broke the socket's rules; closed, counted, logged sparingly."""


class RelayServer:
    """Accepts hook connections; one reader thread per traced process."""

    def __init__(
        self,
        path: str,
        on_hello: HelloHandler,
        mode: int = 0o600,
        on_closed: Callable[[ProcessLink], None] | None = None,
        limits: ConnectionLimits | None = None,
    ) -> None:
        """``mode``: the socket's permissions (a node daemon serves other users too);
        ``on_closed``: called in the reader thread when a process hung up."""
        self.path = path
        self._on_hello = on_hello
        self._on_closed = on_closed
        self.limits = limits or ConnectionLimits()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        os.chmod(path, mode)
        self.sock.listen(128)
        self.links: list[ProcessLink] = []
        self._readers: list[threading.Thread] = []
        self._conns: dict[socket.socket, PeerCredentials] = {}
        self._per_uid: dict[int, int] = {}
        self._big_reads: dict[int, threading.BoundedSemaphore] = {}
        self._lock = threading.Lock()
        self._accepting = True
        self._stopping = False  # stop_reading was called: connections end at our side
        # A descriptor kept in reserve: at EMFILE it is given up for one accept(), so the
        # connection we cannot serve is closed at once instead of waiting in the backlog.
        self._spare: int | None = _open_spare()
        self.accept_errors = 0
        self.refused = 0
        self._accept_log = RateLimitedLog(log)
        self._refusal_log = RateLimitedLog(log)
        self._acceptor = threading.Thread(target=self._accept, name="tfprof-relay", daemon=True)

    def start(self) -> None:
        self._acceptor.start()

    # -- accepting ----------------------------------------------------------------------

    def _accept(self) -> None:
        pause = 0.0
        while self._accepting:
            try:
                conn, _ = self.sock.accept()
            except OSError as exc:
                if not self._accepting:
                    return  # close() shut the socket
                self.accept_errors += 1
                shed = self._shed_one() if exc.errno in (errno.EMFILE, errno.ENFILE) else False
                self._accept_log.note(
                    f"cannot accept connections on {self.path}: {exc.strerror or exc}"
                    + (" (a waiting connection was closed unserved)" if shed else "")
                    + "; retrying"
                )
                pause = min(max(pause * 2, ACCEPT_BACKOFF_S[0]), ACCEPT_BACKOFF_S[1])
                time.sleep(pause)
                continue
            pause = 0.0
            self._admit(conn)

    def _shed_one(self) -> bool:
        """Out of descriptors: spend the spare one on taking the next waiting connection
        off the backlog and closing it, so its process sees the refusal and retries."""
        if self._spare is None:
            return False
        os.close(self._spare)
        self._spare = None
        try:
            conn, _ = self.sock.accept()
            conn.close()
            return True
        except OSError:
            return False
        finally:
            self._spare = _open_spare()

    def _admit(self, conn: socket.socket) -> None:
        """Count the connection against its uid and start its reader, or refuse it."""
        creds = peer_credentials(conn)
        limits = self.limits
        with self._lock:
            held = self._per_uid.get(creds.uid, 0)
            if len(self._conns) >= limits.max_connections:
                why = f"the socket holds its limit of {limits.max_connections} connections"
            elif held >= limits.max_per_uid:
                why = f"uid {creds.uid} holds its limit of {limits.max_per_uid} connections"
            else:
                why = ""
                self._conns[conn] = creds
                self._per_uid[creds.uid] = held + 1
        if why:
            self._refuse(conn, creds, why)
            return
        # The process as it is now, while it surely lives (it just connected): its hello
        # may be read much later, on a busy host after the process is gone.
        watch = ProcessWatch(creds.pid)
        reader = threading.Thread(
            target=self._serve, args=(conn, creds, watch), name="tfprof-relay-conn", daemon=True
        )
        # Started under the lock: wait_closed, which copies the list under it, must
        # never join a reader that has not started (a job that exits at once).
        with self._lock:
            # A long-running daemon forgets the readers of processes gone.
            self._readers = [r for r in self._readers if r.is_alive()]
            try:
                reader.start()
            except RuntimeError:  # no threads left
                started = False
            else:
                started = True
                self._readers.append(reader)
        if not started:
            self._release(conn, creds)
            self._refuse(conn, creds, "no thread left to read it")

    def _refuse(self, conn: socket.socket, creds: PeerCredentials, why: str) -> None:
        self.refused += 1
        self._refusal_log.note(f"refused a connection of pid {creds.pid} uid {creds.uid}: {why}")
        conn.close()

    def _release(self, conn: socket.socket, creds: PeerCredentials) -> None:
        with self._lock:
            if self._conns.pop(conn, None) is None:
                return
            left = self._per_uid.get(creds.uid, 1) - 1
            if left > 0:
                self._per_uid[creds.uid] = left
            else:
                self._per_uid.pop(creds.uid, None)
                self._big_reads.pop(creds.uid, None)

    # -- reading ------------------------------------------------------------------------

    def _big_read_slots(self, uid: int) -> threading.BoundedSemaphore:
        with self._lock:
            slots = self._big_reads.get(uid)
            if slots is None:
                slots = self._big_reads[uid] = threading.BoundedSemaphore(BIG_READS_PER_UID)
            return slots

    def _serve(self, conn: socket.socket, creds: PeerCredentials, watch: ProcessWatch) -> None:
        link: ProcessLink | None = None
        # Until the hello, a silent connection is closed after the deadline.
        conn.settimeout(self.limits.hello_timeout_s)
        stream: IO[bytes] = conn.makefile("rb", buffering=1 << 16)  # type: ignore[assignment]
        try:
            while True:
                header = stream.read(frames.HEADER.size)
                if len(header) < frames.HEADER.size:
                    break
                kind, length = frames.HEADER.unpack(header)
                if link is None and kind != FrameType.HELLO:
                    raise Refused(f"frame of kind {kind} before its hello")
                limit = frames.MAX_HELLO_BYTES if link is None else frames.MAX_FRAME_BYTES
                if length > limit:
                    raise Refused(f"frame of {length:,} bytes (the limit is {limit:,})")
                payload = self._read_payload(stream, length, creds.uid)
                if payload is None:
                    break
                if kind == FrameType.HELLO:
                    if link is not None:
                        raise Refused("a second hello")
                    link = self._hello(conn, payload, creds, watch)
                    if link is None:
                        break
                    conn.settimeout(None)
                elif link is None:
                    break  # unreachable: checked at the header
                elif kind == FrameType.RECORDS:
                    link.on_records(frames.decode_records(memoryview(payload)))
                elif kind == FrameType.STACKS:
                    link.on_stacks(frames.decode_stacks(memoryview(payload)))
                elif kind == FrameType.DEVICES:
                    link.on_devices(json.loads(payload))
                elif kind == FrameType.WINDOW:
                    link.on_window(json.loads(payload))
                elif kind == FrameType.GOODBYE:
                    link.goodbye = json.loads(payload)
        except Refused as exc:
            self.refused += 1
            self._refusal_log.note(
                f"closed the connection of pid {creds.pid} uid {creds.uid}: {exc}"
            )
        except (OSError, ValueError) as exc:
            if link is None:
                self._refusal_log.note(
                    f"closed the connection of pid {creds.pid} uid {creds.uid} before its "
                    f"hello: {exc}"
                )
            else:
                log.warning("relay error for pid %s: %s", link.pid, exc)
        finally:
            if link is not None:
                link.detach_hook()
            stream.close()
            self._release(conn, creds)
            conn.close()
            if link is not None:
                link.connection_closed(self._stopping)
                link.closed.set()
                if self._on_closed is not None:
                    self._on_closed(link)

    def _read_payload(self, stream: IO[bytes], length: int, uid: int) -> bytearray | None:
        """``length`` bytes as they arrive, ``READ_CHUNK`` at a time (memory follows what
        was sent, not what the header claims); None at an early end."""
        slots = self._big_read_slots(uid) if length > BIG_READ_BYTES else None
        if slots is not None:
            slots.acquire()
        try:
            payload = bytearray()
            while len(payload) < length:
                chunk = stream.read(min(READ_CHUNK, length - len(payload)))
                if not chunk:
                    return None
                payload += chunk
            return payload
        finally:
            if slots is not None:
                slots.release()

    def _hello(
        self, conn: socket.socket, payload: bytearray, creds: PeerCredentials, watch: ProcessWatch
    ) -> ProcessLink | None:
        info = json.loads(payload)
        if not isinstance(info, dict):
            raise ValueError("the hello is not a JSON object")
        # What the kernel says, over anything the process says about itself.
        info["peer_pid"], info["peer_uid"], info["peer_gid"] = creds
        info["peer_watch"] = watch
        link = self._on_hello(info)
        if link is None:
            return None
        link.attach_hook(conn, str(info.get("capture", "always")))
        with self._lock:
            self.links.append(link)
        return link

    # -- stopping -----------------------------------------------------------------------

    def wait_closed(self, timeout: float) -> bool:
        """Wait until every connected process has hung up (they do so at exit)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            readers = list(self._readers)
        for reader in readers:
            reader.join(max(0.0, deadline - time.monotonic()))
        return not any(r.is_alive() for r in readers)

    def forget(self, link: ProcessLink) -> None:
        """Drop a finished process from ``links`` (a daemon runs for months)."""
        with self._lock:
            if link in self.links:
                self.links.remove(link)

    def stop_reading(self) -> None:
        """Stop taking frames: each process's next send fails (it counts that frame and
        reconnects); what is already in the socket is still read to its end."""
        self._stopping = True
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RD)
            except OSError:
                pass

    def close(self) -> None:
        """Stop accepting. Connections made from now on are refused (a hook retries
        later, on the next relay); those already waiting in the listen backlog are
        accepted and read like the others: their processes may have written frames into
        them, which would otherwise vanish with the backlog, uncounted by anyone."""
        self._accepting = False
        if self.sock.fileno() < 0:
            return  # closed already
        try:
            # Refuses new connections at once; accept() still returns the waiting ones,
            # then fails (EINVAL), which also ends the acceptor thread.
            self.sock.shutdown(socket.SHUT_RD)
        except OSError:
            pass
        self.sock.setblocking(False)  # never wait here, whatever shutdown did
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                break
            conn.setblocking(True)
            self._admit(conn)
        if self._acceptor.is_alive():
            # A connection it accepted is registered before stop_reading looks.
            self._acceptor.join(ACCEPTOR_JOIN_S)
        self.sock.close()
        if self._spare is not None:
            os.close(self._spare)
            self._spare = None
        try:
            os.unlink(self.path)
        except OSError:
            pass


def _open_spare() -> int | None:
    try:
        return os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
