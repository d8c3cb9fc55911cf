"""A raw agent stream for gRPC-level tests: send messages one at a time, read acks with a
timeout (a reader thread drains the response side)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

import grpc

from tfprof.proto import collector_pb2 as pb
from tfprof.proto import collector_pb2_grpc as pb_grpc

_END = object()


class RawStream:
    def __init__(
        self,
        stub: pb_grpc.CollectorStub,
        metadata: tuple[tuple[str, str], ...] | None = None,
        timeout: float = 30.0,
    ) -> None:
        self._requests: queue.Queue[object] = queue.Queue()
        self.acks: queue.Queue[pb.Ack | grpc.RpcError | None] = queue.Queue()
        self.call = stub.Stream(self._feed(), metadata=metadata, timeout=timeout)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _feed(self) -> Iterator[pb.AgentMessage]:
        while (item := self._requests.get()) is not _END:
            assert isinstance(item, pb.AgentMessage)
            yield item

    def _read(self) -> None:
        try:
            for ack in self.call:
                self.acks.put(ack)
            self.acks.put(None)
        except grpc.RpcError as exc:
            self.acks.put(exc)

    def send(self, message: pb.AgentMessage) -> None:
        self._requests.put(message)

    def next_ack(self, timeout: float = 10.0) -> pb.Ack:
        item = self.acks.get(timeout=timeout)
        if not isinstance(item, pb.Ack):
            raise AssertionError(f"expected an ack, got {item!r}")
        return item

    def error(self, timeout: float = 10.0) -> grpc.RpcError:
        """The status the call ended with (acks before it are skipped)."""
        while True:
            item = self.acks.get(timeout=timeout)
            if isinstance(item, grpc.RpcError):
                return item
            if item is None:
                raise AssertionError("the call ended OK")

    def close(self) -> None:
        self._requests.put(_END)
        self._reader.join(10)
