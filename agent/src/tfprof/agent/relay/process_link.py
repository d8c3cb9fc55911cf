"""One traced process as the relay sees it: its hello, its collector stream, its counters.

``RelayServer`` (socket_server.py) reads the process's frames and hands them here; a
``ProcessLink`` turns them into protobuf batches on its stream (``StreamDelivery``), adds
the host samples taken of the process, and sends capture windows back down its socket.
"""

from __future__ import annotations

import logging
import select
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from tfprof.agent.inprocess import frames
from tfprof.agent.relay.collector_client import CollectorClient
from tfprof.agent.relay.delivery import StreamDelivery
from tfprof.agent.relay.host_metrics import HostSample
from tfprof.agent.relay.process_end import ProcessEnd, ProcessWatch
from tfprof.agent.relay.spool import Spool
from tfprof.core import records
from tfprof.core.code_stacks import StackBatch
from tfprof.proto import collector_pb2 as pb

log = logging.getLogger("tfprof.agent.relay.process_link")

CONTROL_SEND_S = 1.0  # longest a capture window may wait for the hook's socket

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


def stacks_proto(batch: StackBatch, out: pb.Stacks) -> None:
    """A hook's stacks frame as the wire's ``Stacks`` (all-zero sample columns empty)."""
    out.frame_base = batch.frame_base
    out.node_base = batch.node_base
    out.dropped_samples = batch.dropped
    for name, column in batch.frames.items():
        getattr(out, f"frame_{name}").extend(column)
    for name, column in batch.nodes.items():
        getattr(out, f"node_{name}").extend(column)
    for name, column in batch.samples.items():
        if any(column):
            getattr(out, name).extend(column)


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
        # The process as its relay sees it (set by the hub at hello): whether and how it
        # ended, for a stream whose process never said goodbye.
        self.watch: ProcessWatch | None = None
        self.end: ProcessEnd | None = None
        self.outlived = False  # it said hello again (exec): this image ended, not it
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

    def on_stacks(self, decoded: frames.DecodedStacks) -> None:
        """Stacks go in batches of their own; a batch the relay cannot keep has its
        samples counted in the goodbye's ``dropped_stack_samples`` (not as records)."""
        message = pb.AgentMessage()
        batch = message.batch
        batch.string_base = decoded.string_base
        batch.strings.extend(decoded.strings)
        batch.dropped = self.dropped_queue  # unchanged: the latest records frame's count
        stacks_proto(decoded.batch, batch.stacks)
        self._attach_clock(batch)
        self.sender.send(message, 0, samples=len(decoded.batch))

    def on_window(self, edge: dict[str, Any]) -> None:
        """The hook turned capturing on or off: the edge travels at once, in its own
        batch, in order with the records before and after it."""
        message = pb.AgentMessage()
        message.batch.capture_edges.add(on=bool(edge.get("on")), at_ns=int(edge.get("at_ns", 0)))
        self._attach_clock(message.batch)
        self.sender.send(message, 0)

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

    def connection_closed(self, relay_stopping: bool) -> None:
        """The process's connection ended: without its goodbye, note whether the process
        ended with it (a signal, os._exit); None while it lives on (it exec'ed, or is
        slow to go: the launcher looks again at the job's end)."""
        if self.goodbye is not None or self.watch is None or relay_stopping:
            return
        self.end = self.watch.wait_ended()

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
            dropped_stack_samples=int(counts.get("dropped_stack_samples", 0)),
            exit_code=exit_code,
        )
        if self.goodbye is None and (self.end is None or self.outlived):
            # The process never said goodbye and nobody saw it end (it lives on, or its
            # pid is not ours to see): what it still held is unknown, so the stream
            # stays incomplete rather than claim a clean end.
            return self.sender.finish(None, timeout)
        if self.goodbye is None and self.end is not None:
            # It ended without its goodbye (a signal, os._exit) and we saw it go: the
            # counts are what we received; what it still held is unknown to anyone.
            goodbye.end = self.end.end  # type: ignore[assignment]
            goodbye.exit_code = self.end.exit_code
            goodbye.signal = self.end.signal
        return self.sender.finish(goodbye, timeout)
