"""The collector's gRPC server: ``grpc.aio`` on an event loop of its own thread.

``CollectorServer`` is what ``serve`` and the embedded collector drive, from ordinary
threads: construct (binds the port), ``start``, ``stop(grace)``. Inside, one event loop
serves every call (collector/service/servicer.py), so thousands of mostly idle streams cost
coroutines, not threads; storing runs in a bounded pool (``max_workers`` threads) and a
single thread records captures. The server carries health checking, reflection, optional
TLS and bearer-token authentication (service/auth.py), metrics (service/metrics.py), and
stops gracefully (stop accepting, drain, flush every stream's writer).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import threading
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import grpc
import grpc.aio
from grpc_health.v1 import _async as health_aio
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from tfprof.collector.config import CollectorConfig, read_file_text, read_token, read_token_key
from tfprof.collector.errors import AddressInUse, CannotListen
from tfprof.collector.service.auth import Authorizer, TokenAuthInterceptor
from tfprof.collector.service.byte_budget import ByteBudget
from tfprof.collector.service.messages import OVERSIZE_HEADROOM
from tfprof.collector.service.metrics import CollectorMetrics
from tfprof.collector.service.servicer import (
    SERVICE_NAME,
    Access,
    CollectorServicer,
    Limits,
    status_for,
)
from tfprof.collector.store import Store
from tfprof.collector.store.capture_log import CaptureLog
from tfprof.core.redact import patterns_from

__all__ = ["DEFAULT_MAX_MESSAGE_BYTES", "SERVICE_NAME", "CollectorServer", "status_for"]

log = logging.getLogger("tfprof.collector.service.server")

DEFAULT_MAX_MESSAGE_BYTES = 64 << 20
DEFAULT_MAX_STREAMS = 16384
DEFAULT_MAX_INFLIGHT_BYTES = 256 << 20
DEFAULT_HELLO_TIMEOUT_S = 30.0
DRAIN_S = 10.0  # after gRPC's grace, how long cancelled streams get to close their files
KEEPALIVE_MS = 60_000
KEEPALIVE_TIMEOUT_MS = 20_000
T = TypeVar("T")


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
        max_workers: int = 16,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        *,
        fsync: bool = True,
        tls_cert: bytes | None = None,
        tls_key: bytes | None = None,
        auth_token: str | None = None,
        metrics: CollectorMetrics | None = None,
        max_streams: int = DEFAULT_MAX_STREAMS,
        max_inflight_bytes: int = DEFAULT_MAX_INFLIGHT_BYTES,
        hello_timeout_s: float = DEFAULT_HELLO_TIMEOUT_S,
        token_key: bytes | None = None,
        tls_client_ca: bytes | None = None,
        redact: tuple[str, ...] = (),
    ) -> None:
        """``auth_token``: the fleet token; ``token_key``: the key of job and node tokens;
        ``tls_client_ca``: require client certificates signed by it (mTLS)."""
        self.store = Store(data_dir, fsync=fsync)
        self.authorizer = Authorizer(auth_token, token_key)
        self._max_streams = max_streams
        self.metrics = metrics or CollectorMetrics()
        self.metrics.track_storage(lambda: self.store.bytes_stored)
        self._storage = ThreadPoolExecutor(max_workers, thread_name_prefix="tfprof-store")
        self._control = ThreadPoolExecutor(1, thread_name_prefix="tfprof-control")
        self.servicer = CollectorServicer(
            self.store,
            self.metrics,
            Limits(max_message_bytes, max_streams, hello_timeout_s),
            ByteBudget(max_inflight_bytes),
            self._storage,
            self._control,
            CaptureLog(data_dir, fsync=fsync),
            Access(self.authorizer, patterns_from(redact)),
        )
        check_free(listen)  # before gRPC tries: its failed bind logs a C-level line
        credentials = None
        if tls_cert is not None and tls_key is not None:
            credentials = grpc.ssl_server_credentials(
                [(tls_key, tls_cert)],
                root_certificates=tls_client_ca,
                require_client_auth=tls_client_ca is not None,
            )
        self._stopped = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="tfprof-grpc-loop", daemon=True
        )
        self._thread.start()
        try:
            self.port = self._run(self._build(listen, max_message_bytes, credentials))
        except BaseException:
            self._close_loop()
            raise
        if self.authorizer.enabled and credentials is None:
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
        token_key = read_token_key(config.token_key_file) if config.token_key_file else None
        client_ca = (
            read_file_text("client CA", config.tls_client_ca) if config.tls_client_ca else None
        )
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
            max_streams=config.max_streams,
            max_inflight_bytes=config.max_inflight_bytes,
            hello_timeout_s=config.hello_timeout,
            token_key=token_key,
            tls_client_ca=client_ca,
            redact=tuple(p for p in config.redact.split(",") if p.strip()),
        )

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    async def _build(
        self,
        listen: str,
        max_message_bytes: int,
        credentials: grpc.ServerCredentials | None,
    ) -> int:
        # Created on the loop: grpc.aio binds a server to the loop it is made on.
        interceptors: list[grpc.aio.ServerInterceptor[object, object]] = []
        if self.authorizer.enabled:
            interceptors.append(
                TokenAuthInterceptor(
                    self.authorizer,
                    on_denied=lambda _m: self.metrics.request_error("UNAUTHENTICATED"),
                )
            )
        self.server = grpc.aio.server(
            interceptors=interceptors,
            options=[
                ("grpc.max_receive_message_length", max_message_bytes + OVERSIZE_HEADROOM),
                ("grpc.max_send_message_length", max_message_bytes),
                ("grpc.so_reuseport", 0),
                # Calls gRPC holds before the loop picks them up: its default (1,000
                # soft, 3,000 hard) refuses a burst of agents connecting at once (a
                # collector restart) with INTERNAL; our own limit is --max-streams.
                ("grpc.server.max_pending_requests", max(1000, self._max_streams)),
                ("grpc.server.max_pending_requests_hard_limit", max(3000, 2 * self._max_streams)),
                # A vanished agent's call (its host gone, the network cut) is ended by
                # pings rather than held for hours; agents ping an idle call this often.
                ("grpc.keepalive_time_ms", KEEPALIVE_MS),
                ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
                ("grpc.http2.min_ping_interval_without_data_ms", KEEPALIVE_MS // 2),
                ("grpc.keepalive_permit_without_calls", 1),
            ],
        )
        self.server.add_generic_rpc_handlers((self.servicer.handlers(),))
        self.health = health_aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable_server_reflection(
            (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), self.server
        )
        try:
            if credentials is not None:
                port = self.server.add_secure_port(listen, credentials)
            else:
                port = self.server.add_insecure_port(listen)
        except RuntimeError as exc:  # how grpc reports a failed bind
            raise CannotListen(
                f"cannot listen on {listen}: address in use, not local or not resolvable"
            ) from exc
        if port == 0:  # how older grpc releases report it
            raise CannotListen(f"cannot listen on {listen}")
        return port

    def start(self) -> CollectorServer:
        self._run(self._start())
        return self

    async def _start(self) -> None:
        await self.server.start()
        await self.health.set("", health_pb2.HealthCheckResponse.SERVING)
        await self.health.set(SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)

    def stop(self, grace: float = 5.0) -> None:
        """Stop accepting, let running streams finish within ``grace`` seconds; every
        stream's writer is closed (flushed) as its call ends. Safe to call twice."""
        if self._stopped.is_set():
            return
        try:
            self._run(self._stop(grace))
        finally:
            self._storage.shutdown(wait=True)
            self._control.shutdown(wait=True)
            self._close_loop()
            self._stopped.set()

    async def _stop(self, grace: float) -> None:
        await self.health.enter_graceful_shutdown()
        await self.server.stop(grace)
        # Cancelled streams close their writers in their own `finally`: wait for them.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DRAIN_S
        while self.servicer.registry.calls and loop.time() < deadline:
            await asyncio.sleep(0.01)

    def _close_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def wait(self) -> None:
        """Block until ``stop`` has finished."""
        self._stopped.wait()
