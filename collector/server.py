"""The gRPC face of the collector: a thin adapter from protos to ``IngestStream``.

Domain errors become status codes here and nowhere else. The server carries health
checking and reflection, and stops gracefully (stop accepting, drain, flush).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from tfprof.collector.errors import (
    CollectorError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    Unsupported,
)
from tfprof.collector.ingest import IngestStream
from tfprof.collector.store import Store
from tfprof.proto import collector_pb2 as pb
from tfprof.proto import collector_pb2_grpc as pb_grpc

log = logging.getLogger("tfprof.collector.server")

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Collector"].full_name
DEFAULT_MAX_MESSAGE_BYTES = 64 << 20

_STATUS = {
    InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
    Unsupported: grpc.StatusCode.UNIMPLEMENTED,
    NotFound: grpc.StatusCode.NOT_FOUND,
}


def status_for(exc: CollectorError) -> grpc.StatusCode:
    for kind, code in _STATUS.items():
        if isinstance(exc, kind):
            return code
    return grpc.StatusCode.INTERNAL


class CollectorServicer(pb_grpc.CollectorServicer):
    def __init__(self, store: Store) -> None:
        self.store = store

    def Stream(
        self, request_iterator: Iterator[pb.AgentMessage], context: grpc.ServicerContext
    ) -> Iterator[pb.Ack]:
        ingest = IngestStream(self.store)
        try:
            for message in request_iterator:
                which = message.WhichOneof("msg")
                if which == "hello":
                    yield pb.Ack(seq=ingest.hello(message.hello))
                elif which == "batch":
                    yield pb.Ack(seq=ingest.batch(message.batch))
                elif which == "goodbye":
                    ingest.goodbye(message.goodbye)
                else:
                    raise InvalidArgument("empty agent message")
        except CollectorError as exc:
            log.warning("rejected stream from %s: %s", context.peer(), exc)
            context.abort(status_for(exc), str(exc))
        finally:
            ingest.close()

    def Clock(self, request: pb.ClockRequest, context: grpc.ServicerContext) -> pb.ClockReply:
        t2 = time.time_ns()
        return pb.ClockReply(t1_ns=request.t1_ns, t2_ns=t2, t3_ns=time.time_ns())


class CollectorServer:
    """A running collector; ``port`` is the bound port (useful with port 0)."""

    def __init__(
        self,
        listen: str,
        data_dir: str,
        max_workers: int = 256,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    ) -> None:
        self.store = Store(data_dir)
        self.server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="tfprof-rpc"),
            options=[
                ("grpc.max_receive_message_length", max_message_bytes),
                ("grpc.max_send_message_length", max_message_bytes),
                ("grpc.so_reuseport", 0),
            ],
            maximum_concurrent_rpcs=max_workers,
        )
        pb_grpc.add_CollectorServicer_to_server(CollectorServicer(self.store), self.server)
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable_server_reflection(
            (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), self.server
        )
        self.port = self.server.add_insecure_port(listen)
        if self.port == 0:
            raise OSError(f"cannot listen on {listen}")
        host = listen.rpartition(":")[0]
        self.address = f"{host}:{self.port}"

    def start(self) -> CollectorServer:
        self.server.start()
        self.health.set("", health_pb2.HealthCheckResponse.SERVING)
        self.health.set(SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)
        return self

    def stop(self, grace: float = 5.0) -> None:
        """Stop accepting, let running streams finish within ``grace`` seconds."""
        self.health.enter_graceful_shutdown()
        self.server.stop(grace).wait()

    def wait(self) -> None:
        self.server.wait_for_termination()
