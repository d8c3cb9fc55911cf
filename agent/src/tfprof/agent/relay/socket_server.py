"""The launcher's relay: hook frames in over a Unix socket, protobuf batches out.

Each traced process connects once; its frames become one gRPC stream to the collector
(``ProcessLink``). Host samples of that process join the same stream.
"""

from __future__ import annotations

import json
import logging
import os
import select
import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from tfprof.agent.inprocess import frames
from tfprof.agent.inprocess.frames import FrameType
from tfprof.agent.relay.collector_client import CollectorClient
from tfprof.agent.relay.delivery import StreamDelivery
from tfprof.agent.relay.host_metrics import HostSample
from tfprof.agent.relay.spool import Spool
from tfprof.core import records
from tfprof.proto import collector_pb2 as pb

log = logging.getLogger("tfprof.agent.relay.socket_server")

CONTROL_SEND_S = 1.0  # longest a capture window may wait for the hook's socket
ACCEPTOR_JOIN_S = 5.0  # longest close() waits for the acceptor to hand over its last one

# Host samples ride on records batches; without records they go on their own this often
# (a batch per sample would cost the collector a write and an fsync each).
HOST_FLUSH_NS = 2 * 10**9


def device_proto(d: dict[str, Any]) -> pb.Device:
    return pb.Device(
        ordinal=int(d.get("ordinal", 0)),
        uuid=str(d.get("uuid", "")),
        name=str(d.get("name", "")),
        pci_bus_id=str(d.get("pci_bus_id", "")),
        compute_capability_major=int(d.get("compute_capability_major", 0)),
        compute_capability_minor=int(d.get("compute_capability_minor", 0)),
        sm_count=int(d.get("sm_count", 0)),
        memory_bytes=int(d.get("memory_bytes", 0)),
    )


def records_proto(decoded: frames.DecodedRecords, out: pb.Records) -> None:
    width = 8 * decoded.count
    zero = bytes(width)
    for i, name in enumerate(records.COLUMNS):
        column = decoded.column_data[i * width : (i + 1) * width]
        # An all-zero column travels empty (see Records in collector.proto): kernels
        # carry no copy fields and copies no launch fields, and filling protobuf
        # columns is the launcher's main cost. (Comparing bytes is a memcmp.)
        if column.tobytes() != zero:
            getattr(out, name).extend(frames.int64_values(column))


class ProcessLink:
    """One traced process: its identity, its collector stream, its counters."""

    def __init__(
        self,
        client: CollectorClient,
        hello: pb.Hello,
        on_failure: Callable[[str], None],
        spool: Spool | None = None,
        bases: tuple[int, int] = (0, 0),
    ) -> None:
        self.pid = hello.pid
        self.sampled_pid = hello.pid  # host samples come for this pid (see RelayHub)
        # A process that reconnects to a restarted node daemon counts from its first
        # stream on: (records, drops) it handed to earlier streams are not this one's.
        self.records_base, self.dropped_base = bases
        self.hello = hello
        # The offset merge applies to this stream (collector = local + offset): capture
        # windows come in collector time and go to the hook in local time.
        self.clock_offset_ns = hello.clock_offset_ns
        self._hook: socket.socket | None = None  # set once the hook follows windows
        self._early_windows: list[bytes] | None = []  # windows before attach_hook
        self._control_lock = threading.Lock()
        self.sender = StreamDelivery(client, hello, spool, on_failure, on_captures=self.on_captures)
        self._clock: tuple[int, int] | None = None
        self.records = 0
        self.dropped_queue = 0
        self.goodbye: dict[str, Any] | None = None
        self.closed = threading.Event()
        self._lock = threading.Lock()
        self._host: list[HostSample] = []

    def update_clock(self, offset_ns: int, rtt_ns: int) -> None:
        """A fresh clock estimate; it travels with the next batch."""
        with self._lock:
            self._clock = (offset_ns, rtt_ns)
            self.clock_offset_ns = offset_ns

    def _attach_clock(self, batch: pb.Batch) -> None:
        with self._lock:
            fresh, self._clock = self._clock, None
        if fresh is not None:
            batch.clock_updated = True
            batch.clock_offset_ns, batch.clock_rtt_ns = fresh

    def attach_hook(self, conn: socket.socket, capture: str) -> None:
        """The hook's socket, for capture windows; only a process whose hello said it
        follows windows (``capture`` other than ``always``) is sent any."""
        with self._control_lock:
            early, self._early_windows = self._early_windows or [], None
            if capture == "always":
                return
            self._hook = conn
        for frame in early:
            self._send_control(frame)

    def detach_hook(self) -> None:
        with self._control_lock:
            self._hook = None
            self._early_windows = None

    def on_captures(self, captures: list[pb.CaptureWindow]) -> int:
        """Send the collector's capture windows to the hook, each converted to this
        host's realtime clock with the stream's offset; the number sent."""
        offset = self.clock_offset_ns
        sent = 0
        for window in captures:
            frame = frames.encode_capture_frame(
                window.capture_id,
                window.start_ns - offset,
                window.duration_ns,
                window.steps,
                window.skip_steps,
            )
            with self._control_lock:
                if self._early_windows is not None:  # hello not relayed yet
                    self._early_windows.append(frame)
                    continue
            sent += self._send_control(frame)
        return sent

    def _send_control(self, frame: bytes) -> int:
        # Never blocks the relay for long: a hook that stopped reading loses its
        # windows (said in the log), the records of the stream are untouched.
        with self._control_lock:
            conn = self._hook
            if conn is None:
                return 0
            view = memoryview(frame)
            deadline = time.monotonic() + CONTROL_SEND_S
            try:
                while view:
                    left = deadline - time.monotonic()
                    if left <= 0 or not select.select([], [conn], [], left)[1]:
                        raise TimeoutError("the traced process does not read its socket")
                    n = conn.send(view, socket.MSG_DONTWAIT | getattr(socket, "MSG_NOSIGNAL", 0))
                    view = view[n:]
            except (OSError, ValueError) as exc:
                log.warning("cannot send a capture window to pid %s: %s", self.pid, exc)
                self._hook = None
                return 0
        return 1

    def on_records(self, decoded: frames.DecodedRecords) -> None:
        message = pb.AgentMessage()
        batch = message.batch  # built in place: the sender serializes the message once
        batch.string_base = decoded.string_base
        batch.dropped = max(0, decoded.dropped - self.dropped_base)
        batch.strings.extend(decoded.strings)
        records_proto(decoded, batch.records)
        self._attach_host(batch)
        self._attach_clock(batch)
        self.dropped_queue = batch.dropped
        self.records += decoded.count
        self.sender.send(message, decoded.count)

    def on_devices(self, devices: list[dict[str, Any]]) -> None:
        message = pb.AgentMessage()
        message.batch.devices.extend(device_proto(d) for d in devices)
        self.sender.send(message, 0)

    def add_host_sample(self, sample: HostSample) -> bool:
        """Keep a sample for the next batch; True when they are due to go on their own
        (no records batch took them for HOST_FLUSH_NS)."""
        if self.closed.is_set():
            return False
        with self._lock:
            self._host.append(sample)
            return sample.time_ns - self._host[0].time_ns >= HOST_FLUSH_NS

    def flush_host(self) -> None:
        message = pb.AgentMessage()
        if self._attach_host(message.batch):
            self._attach_clock(message.batch)
            self.sender.send(message, 0)

    def _attach_host(self, batch: pb.Batch) -> bool:
        with self._lock:
            samples, self._host = self._host, []
        if not samples:
            return False
        h = batch.host
        h.time_ns.extend(s.time_ns for s in samples)
        h.cpu_percent.extend(s.cpu_percent for s in samples)
        h.rss_bytes.extend(s.rss_bytes for s in samples)
        h.threads.extend(s.threads for s in samples)
        h.read_bytes.extend(s.read_bytes for s in samples)
        h.write_bytes.extend(s.write_bytes for s in samples)
        return True

    def carried(self) -> dict[str, int]:
        """The counts of a goodbye for a stream whose process lives on (the daemon
        stops): the records and the drop count its frames carried."""
        return {
            "records_sent": self.records + self.records_base,
            "dropped_queue": self.dropped_queue + self.dropped_base,
        }

    def finish(self, timeout: float, exit_code: int = 0) -> bool:
        """Say goodbye; False when the stream was left in the spool (or lost)."""
        self.flush_host()
        counts = self.goodbye or {}
        sent = int(counts.get("records_sent", self.records + self.records_base))
        dropped = int(counts.get("dropped_queue", self.dropped_queue + self.dropped_base))
        goodbye = pb.Goodbye(
            records_sent=max(0, sent - self.records_base),
            dropped_queue=max(0, dropped - self.dropped_base),
            dropped_tracer=int(counts.get("dropped_tracer", 0)),
            exit_code=exit_code,
        )
        if self.goodbye is None:
            # The process never said goodbye (killed, exec'ed, out of exit time): what it
            # still held is unknown, so the stream stays incomplete rather than claim
            # a clean end.
            return self.sender.finish(None, timeout)
        return self.sender.finish(goodbye, timeout)


HelloHandler = Callable[[dict[str, Any]], ProcessLink | None]


class RelayServer:
    """Accepts hook connections; one reader thread per traced process."""

    def __init__(
        self,
        path: str,
        on_hello: HelloHandler,
        mode: int = 0o600,
        on_closed: Callable[[ProcessLink], None] | None = None,
    ) -> None:
        """``mode``: the socket's permissions (a node daemon serves other users too);
        ``on_closed``: called in the reader thread when a process hung up."""
        self.path = path
        self._on_hello = on_hello
        self._on_closed = on_closed
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        os.chmod(path, mode)
        self.sock.listen(128)
        self.links: list[ProcessLink] = []
        self._readers: list[threading.Thread] = []
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._accepting = True
        self._acceptor = threading.Thread(target=self._accept, name="tfprof-relay", daemon=True)

    def start(self) -> None:
        self._acceptor.start()

    def _accept(self) -> None:
        while self._accepting:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self._start_reader(conn)

    def _start_reader(self, conn: socket.socket) -> None:
        reader = threading.Thread(
            target=self._serve, args=(conn,), name="tfprof-relay-conn", daemon=True
        )
        # Started under the lock: wait_closed, which copies the list under it, must
        # never join a reader that has not started (a job that exits at once).
        with self._lock:
            # A long-running daemon forgets the readers of processes gone.
            self._readers = [r for r in self._readers if r.is_alive()]
            self._conns.add(conn)
            reader.start()
            self._readers.append(reader)

    def _serve(self, conn: socket.socket) -> None:
        link: ProcessLink | None = None
        stream = conn.makefile("rb", buffering=1 << 20)
        try:
            while True:
                header = stream.read(frames.HEADER.size)
                if len(header) < frames.HEADER.size:
                    break
                kind, length = frames.HEADER.unpack(header)
                if length > frames.MAX_FRAME_BYTES:
                    log.warning("oversized frame (%d bytes) from a traced process", length)
                    break
                payload = stream.read(length)
                if len(payload) < length:
                    break
                if kind == FrameType.HELLO:
                    info = json.loads(payload)
                    info["peer_pid"] = peer_pid(conn)
                    link = self._on_hello(info)
                    if link is None:
                        break
                    link.attach_hook(conn, str(info.get("capture", "always")))
                    with self._lock:
                        self.links.append(link)
                elif link is None:
                    log.warning("frame before hello from a traced process; closing it")
                    break
                elif kind == FrameType.RECORDS:
                    link.on_records(frames.decode_records(payload))
                elif kind == FrameType.DEVICES:
                    link.on_devices(json.loads(payload))
                elif kind == FrameType.GOODBYE:
                    link.goodbye = json.loads(payload)
        except (OSError, ValueError) as exc:
            log.warning("relay error for pid %s: %s", link.pid if link else "?", exc)
        finally:
            if link is not None:
                link.detach_hook()
            stream.close()
            with self._lock:
                self._conns.discard(conn)
            conn.close()
            if link is not None:
                link.closed.set()
                if self._on_closed is not None:
                    self._on_closed(link)

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
            self._start_reader(conn)
        if self._acceptor.is_alive():
            # A connection it accepted is registered before stop_reading looks.
            self._acceptor.join(ACCEPTOR_JOIN_S)
        self.sock.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass


def peer_pid(conn: socket.socket) -> int:
    """The connected process's pid as this process sees it (0 when it cannot be told):
    a node daemon with the host's pid namespace samples pod processes by it, since the pid
    a process reports is its own namespace's."""
    try:
        raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except (OSError, AttributeError):
        return 0
    pid: int = struct.unpack("3i", raw)[0]
    return pid


def new_stream_id() -> str:
    return uuid.uuid4().hex
