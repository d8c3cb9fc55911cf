"""The launcher's gRPC client: one ``Stream`` call per traced process, plus clock probes.

Runs in the launcher, never in the user's process. A stream that cannot reach the
collector does not stop anything: its records are counted as dropped and the user is
told once.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator

import grpc

from tfprof.proto import collector_pb2 as pb
from tfprof.proto import collector_pb2_grpc as pb_grpc

log = logging.getLogger("tfprof.agent.client")

MAX_MESSAGE_BYTES = 64 << 20
MAX_UNACKED_BATCHES = 64  # beyond this the relay waits, which pushes back on the hook
_END = object()


class CollectorClient:
    def __init__(self, target: str) -> None:
        self.target = target
        self.channel = grpc.insecure_channel(
            target,
            options=[
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ],
        )
        self.stub = pb_grpc.CollectorStub(self.channel)

    def estimate_clock(self, samples: int = 5, timeout: float = 2.0) -> tuple[int, int] | None:
        """(offset, round trip) in ns: add offset to local time to get collector time.

        NTP's four timestamps; the sample with the lowest round trip wins because its
        one-way delays are least asymmetric.
        """
        best: tuple[int, int] | None = None
        for _ in range(samples):
            t1 = time.time_ns()
            try:
                reply = self.stub.Clock(pb.ClockRequest(t1_ns=t1), timeout=timeout)
            except grpc.RpcError:
                return best
            t4 = time.time_ns()
            rtt = (t4 - t1) - (reply.t3_ns - reply.t2_ns)
            offset = ((reply.t2_ns - t1) + (reply.t3_ns - t4)) // 2
            if best is None or rtt < best[1]:
                best = (offset, rtt)
        return best

    def open_stream(
        self, hello: pb.Hello, on_failure: Callable[[str], None] | None = None
    ) -> StreamSender:
        return StreamSender(self.stub, hello, on_failure)

    def close(self) -> None:
        self.channel.close()


class StreamSender:
    """Feeds one bidi ``Stream`` call; sequence numbers and acks are tracked here."""

    def __init__(
        self,
        stub: pb_grpc.CollectorStub,
        hello: pb.Hello,
        on_failure: Callable[[str], None] | None,
    ) -> None:
        self.hello = hello
        self._on_failure = on_failure
        self._requests: queue.Queue[object] = queue.Queue()
        self._lock = threading.Condition()
        self._next_seq = 1
        self._unacked: dict[int, int] = {}  # seq -> records
        self.acked_seq = 0
        self.records_acked = 0
        self.dropped = 0  # records that could not be delivered
        self.failed: str | None = None
        self._requests.put(pb.AgentMessage(hello=hello))
        self._call = stub.Stream(self._iter_requests())
        self._reader = threading.Thread(target=self._read_acks, name="tfprof-acks", daemon=True)
        self._reader.start()

    def _iter_requests(self) -> Iterator[pb.AgentMessage]:
        while True:
            item = self._requests.get()
            if item is _END:
                return
            assert isinstance(item, pb.AgentMessage)
            yield item

    def _read_acks(self) -> None:
        try:
            for ack in self._call:
                with self._lock:
                    for seq in [s for s in self._unacked if s <= ack.seq]:
                        self.records_acked += self._unacked.pop(seq)
                    self.acked_seq = max(self.acked_seq, ack.seq)
                    self._lock.notify_all()
        except grpc.RpcError as exc:
            self._fail(f"{exc.code().name}: {exc.details()}")
        finally:
            with self._lock:
                if self.failed is None and self._unacked:
                    self._fail_locked("the collector closed the stream before acknowledging")
                self._lock.notify_all()

    def _fail(self, why: str) -> None:
        with self._lock:
            self._fail_locked(why)

    def _fail_locked(self, why: str) -> None:
        if self.failed is not None:
            return
        self.failed = why
        self.dropped += sum(self._unacked.values())
        self._unacked.clear()
        self._lock.notify_all()
        if self._on_failure is not None:
            self._on_failure(why)

    def send(self, batch: pb.Batch, records: int) -> bool:
        """Queue a batch; waits while too many are unacknowledged. False if dropped."""
        with self._lock:
            while self.failed is None and len(self._unacked) >= MAX_UNACKED_BATCHES:
                self._lock.wait(0.5)
            if self.failed is not None:
                self.dropped += records
                return False
            batch.seq = self._next_seq
            self._next_seq += 1
            self._unacked[batch.seq] = records
        self._requests.put(pb.AgentMessage(batch=batch))
        return True

    def finish(self, goodbye: pb.Goodbye, timeout: float) -> bool:
        """Send the goodbye, end the call and wait for the last acknowledgement."""
        deadline = time.monotonic() + timeout
        if self.failed is None:
            goodbye.dropped_relay += self.dropped
            self._requests.put(pb.AgentMessage(goodbye=goodbye))
        self._requests.put(_END)
        self._reader.join(max(0.0, deadline - time.monotonic()))
        if self._reader.is_alive():
            self._call.cancel()
            self._fail("timed out waiting for the collector to acknowledge")
            self._reader.join(1.0)
        return self.failed is None
