"""The gRPC face of the collector: a thin adapter from protos to ``IngestStream``.

Domain errors (the collector's and the shared core's, e.g. a bad job name) become
status codes here and nowhere else, through one table. The server carries health
checking, reflection, optional TLS and bearer-token authentication (collector/auth.py),
metrics (collector/metrics.py), and stops gracefully (stop accepting, drain, flush).

Requests are registered with a deserializer that never raises: a message protobuf cannot
parse reaches the servicer as ``Malformed`` and gets ``INVALID_ARGUMENT`` with the parse
error, where gRPC's own handling would answer ``INTERNAL``.
"""

from __future__ import annotations

import errno
import logging
import socket
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass
from typing import NoReturn, TypeVar

import grpc
from google.protobuf.message import DecodeError, Message
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from tfprof.collector.auth import TokenAuthInterceptor
from tfprof.collector.config import CollectorConfig, read_file_text, read_token
from tfprof.collector.errors import (
    AddressInUse,
    CannotListen,
    CollectorError,
    Conflict,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    StorageUnavailable,
    TooLarge,
    Unsupported,
)
from tfprof.collector.ingest import IngestStream
from tfprof.collector.metrics import CollectorMetrics
from tfprof.collector.store import Store
from tfprof.core.errors import InputError, TfprofError
from tfprof.proto import collector_pb2 as pb

log = logging.getLogger("tfprof.collector.server")

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Collector"].full_name
DEFAULT_MAX_MESSAGE_BYTES = 64 << 20

_STATUS: dict[type[TfprofError], grpc.StatusCode] = {
    InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
    Unsupported: grpc.StatusCode.UNIMPLEMENTED,
    NotFound: grpc.StatusCode.NOT_FOUND,
    Conflict: grpc.StatusCode.ABORTED,
    StorageUnavailable: grpc.StatusCode.UNAVAILABLE,
    TooLarge: grpc.StatusCode.RESOURCE_EXHAUSTED,
    # The shared core's input errors (InvalidName, TrackKeyError, ...); after the
    # collector's own, which are searched first.
    InputError: grpc.StatusCode.INVALID_ARGUMENT,
}
# gRPC itself refuses messages this far over the limit before Python sees them (a memory
# bound); up to there our deserializer does, so the refusal is logged and counted.
OVERSIZE_HEADROOM = 1 << 20


def status_for(exc: TfprofError) -> grpc.StatusCode:
    for kind, code in _STATUS.items():
        if isinstance(exc, kind):
            return code
    return grpc.StatusCode.INTERNAL


@dataclass(frozen=True)
class Malformed:
    """A request we refuse to parse: protobuf cannot, or it is over the size limit."""

    error: CollectorError

    def exception(self) -> CollectorError:
        return self.error


Request = TypeVar("Request", bound=Message)


def _lenient(cls: type[Request], max_bytes: int) -> Callable[[bytes], Request | Malformed]:
    name = cls.DESCRIPTOR.name

    def parse(data: bytes) -> Request | Malformed:
        if len(data) > max_bytes:
            return Malformed(
                TooLarge(
                    f"{name} of {len(data)} bytes is over this collector's limit of "
                    f"{max_bytes} (--max-message-bytes)"
                )
            )
        try:
            return cls.FromString(data)
        except DecodeError as exc:
            return Malformed(InvalidArgument(f"malformed {name}: {exc or 'cannot parse'}"))

    return parse


class CollectorServicer:
    def __init__(
        self, store: Store, metrics: CollectorMetrics, max_message_bytes: int = 64 << 20
    ) -> None:
        self.store = store
        self.metrics = metrics
        self.max_message_bytes = max_message_bytes

    def Stream(
        self,
        request_iterator: Iterator[pb.AgentMessage | Malformed],
        context: grpc.ServicerContext,
    ) -> Iterator[pb.Ack]:
        ingest = IngestStream(self.store, self.metrics)
        try:
            for message in request_iterator:
                if isinstance(message, Malformed):
                    raise message.exception()
                which = message.WhichOneof("msg")
                if which == "hello":
                    yield pb.Ack(seq=ingest.hello(message.hello))
                elif which == "batch":
                    yield pb.Ack(seq=ingest.batch(message.batch))
                elif which == "goodbye":
                    ingest.goodbye(message.goodbye)
                else:
                    raise InvalidArgument("empty agent message")
        except TfprofError as exc:
            self._abort(context, exc)
        except grpc.RpcError:
            # The call ended under us: the client went away or its deadline passed, or
            # gRPC refused a message far over the size limit (RESOURCE_EXHAUSTED to the
            # client); either way what was acknowledged is stored.
            self.metrics.request_error("CANCELLED")
            log.warning(
                "stream %s ended by the client or gRPC (cancelled, deadline, or a message "
                "over %d bytes) after %d records",
                ingest.hello_msg.stream_id if ingest.hello_msg else "(before hello)",
                self.max_message_bytes + OVERSIZE_HEADROOM,
                ingest.records,
            )
        finally:
            ingest.close()

    def Clock(
        self, request: pb.ClockRequest | Malformed, context: grpc.ServicerContext
    ) -> pb.ClockReply:
        if isinstance(request, Malformed):
            self._abort(context, request.exception())
        t2 = time.time_ns()
        return pb.ClockReply(t1_ns=request.t1_ns, t2_ns=t2, t3_ns=time.time_ns())

    def _abort(self, context: grpc.ServicerContext, exc: TfprofError) -> NoReturn:
        code = status_for(exc)
        self.metrics.request_error(code.name)
        log.warning("rejected call from %s: %s: %s", context.peer(), code.name, exc)
        context.abort(code, str(exc))
        raise AssertionError("context.abort returned")  # it raises

    def handler(self) -> grpc.GenericRpcHandler[object, object]:
        return grpc.method_handlers_generic_handler(
            SERVICE_NAME,
            {
                "Stream": grpc.stream_stream_rpc_method_handler(
                    self.Stream,
                    request_deserializer=_lenient(pb.AgentMessage, self.max_message_bytes),
                    response_serializer=pb.Ack.SerializeToString,
                ),
                "Clock": grpc.unary_unary_rpc_method_handler(
                    self.Clock,
                    request_deserializer=_lenient(pb.ClockRequest, self.max_message_bytes),
                    response_serializer=pb.ClockReply.SerializeToString,
                ),
            },
        )


def check_free(listen: str) -> None:
    """Raise ``AddressInUse`` when another process listens on ``listen`` (HOST:PORT).

    Anything else (a name that does not resolve, a family this host lacks) is left to
    gRPC's own bind, which reports it as ``CannotListen``.
    """
    host, _, port = listen.rpartition(":")
    if not port.isdigit() or int(port) == 0:
        return
    try:
        infos = socket.getaddrinfo(
            host.strip("[]") or None, int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except OSError:
        return
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        # As gRPC binds: a port in TIME_WAIT is free, one with a listener is not.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise AddressInUse(
                    f"cannot listen on {listen}: the address is in use by another process "
                    "(choose another with --listen HOST:PORT)"
                ) from None


class CollectorServer:
    """A running collector; ``port`` is the bound port (useful with port 0)."""

    def __init__(
        self,
        listen: str,
        data_dir: str,
        max_workers: int = 256,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        *,
        fsync: bool = True,
        tls_cert: bytes | None = None,
        tls_key: bytes | None = None,
        auth_token: str | None = None,
        metrics: CollectorMetrics | None = None,
    ) -> None:
        self.store = Store(data_dir, fsync=fsync)
        self.metrics = metrics or CollectorMetrics()
        self.metrics.track_storage(lambda: self.store.bytes_stored)
        interceptors: list[grpc.ServerInterceptor[object, object]] = []
        if auth_token:
            interceptors.append(
                TokenAuthInterceptor(
                    auth_token, on_denied=lambda _m: self.metrics.request_error("UNAUTHENTICATED")
                )
            )
        self.server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="tfprof-rpc"),
            interceptors=interceptors,
            options=[
                ("grpc.max_receive_message_length", max_message_bytes + OVERSIZE_HEADROOM),
                ("grpc.max_send_message_length", max_message_bytes),
                ("grpc.so_reuseport", 0),
            ],
            maximum_concurrent_rpcs=max_workers,
        )
        self.server.add_generic_rpc_handlers(
            (CollectorServicer(self.store, self.metrics, max_message_bytes).handler(),)
        )
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable_server_reflection(
            (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), self.server
        )
        credentials = None
        check_free(listen)  # before gRPC tries: its failed bind logs a C-level line
        if tls_cert is not None and tls_key is not None:
            credentials = grpc.ssl_server_credentials([(tls_key, tls_cert)])
        try:
            if credentials is not None:
                self.port = self.server.add_secure_port(listen, credentials)
            else:
                self.port = self.server.add_insecure_port(listen)
        except RuntimeError as exc:  # how grpc reports a failed bind
            raise CannotListen(
                f"cannot listen on {listen}: address in use, not local or not resolvable"
            ) from exc
        if self.port == 0:  # how older grpc releases report it
            raise CannotListen(f"cannot listen on {listen}")
        if auth_token and credentials is None:
            log.warning("bearer tokens travel in clear text: use --tls-cert/--tls-key")
        host = listen.rpartition(":")[0]
        self.address = f"{host}:{self.port}"

    @classmethod
    def from_config(
        cls, config: CollectorConfig, metrics: CollectorMetrics | None = None
    ) -> CollectorServer:
        cert = key = None
        if config.tls:
            cert = read_file_text("TLS certificate", config.tls_cert)
            key = read_file_text("TLS key", config.tls_key)
        token = read_token(config.auth_token_file) if config.auth_token_file else None
        return cls(
            config.listen,
            config.data_dir,
            max_workers=config.max_workers,
            max_message_bytes=config.max_message_bytes,
            fsync=config.fsync,
            tls_cert=cert,
            tls_key=key,
            auth_token=token,
            metrics=metrics,
        )

    def start(self) -> CollectorServer:
        self.server.start()
        self.health.set("", health_pb2.HealthCheckResponse.SERVING)
        self.health.set(SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)
        return self

    def stop(self, grace: float = 5.0) -> None:
        """Stop accepting, let running streams finish within ``grace`` seconds; every
        stream's writer is closed (flushed) as its call ends."""
        self.health.enter_graceful_shutdown()
        self.server.stop(grace).wait()

    def wait(self) -> None:
        self.server.wait_for_termination()
