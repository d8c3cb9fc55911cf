"""The launcher's channel to a collector: TLS and token settings, clock probing, and the
raw ``Stream`` call that ``delivery.StreamDelivery`` drives, one per traced process.

Runs in the launcher, never in the user's process.
"""

from __future__ import annotations

from typing import Any

import grpc

from tfprof.agent.inprocess import clock
from tfprof.proto import collector_pb2 as pb
from tfprof.proto import collector_pb2_grpc as pb_grpc

MAX_MESSAGE_BYTES = 64 << 20
BACKOFF_MAX_S = 5.0  # the longest wait between reconnection attempts
# Pings on an idle connection (the collector permits one per KEEPALIVE_MS; see its
# server options) and how long an unanswered one may wait.
KEEPALIVE_MS = 60_000
KEEPALIVE_TIMEOUT_MS = 20_000
STREAM_METHOD = "/{}/Stream".format(pb.DESCRIPTOR.services_by_name["Collector"].full_name)


class CollectorClient:
    """A channel to one collector, with TLS and bearer-token settings applied."""

    def __init__(
        self,
        target: str,
        tls_ca: str = "",
        auth_token: str = "",
        client_cert: tuple[str, str] | None = None,
    ) -> None:
        """``client_cert``: (certificate, key) PEM files, for a collector that requires
        client certificates (mTLS)."""
        self.target = target
        options = [
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            # Reconnect quickly after a collector restart; the stream logic backs off.
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", int(BACKOFF_MAX_S * 1000)),
            # A collector that vanished without closing the connection (a host gone, a
            # network cut) is noticed by pings, not after the kernel's hours of retries.
            ("grpc.keepalive_time_ms", KEEPALIVE_MS),
            ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
        ]
        if tls_ca or client_cert:
            creds = grpc.ssl_channel_credentials(
                root_certificates=_read(tls_ca) if tls_ca else None,
                private_key=_read(client_cert[1]) if client_cert else None,
                certificate_chain=_read(client_cert[0]) if client_cert else None,
            )
            self.channel = grpc.secure_channel(target, creds, options=options)
        else:
            self.channel = grpc.insecure_channel(target, options=options)
        self.metadata: tuple[tuple[str, str], ...] = (
            (("authorization", f"Bearer {auth_token}"),) if auth_token else ()
        )
        self.stub = pb_grpc.CollectorStub(self.channel)
        # Stream takes AgentMessages already serialized (a batch is serialized once,
        # when it is queued, and its bytes are what is kept, spooled and resent).
        self.stream = self.channel.stream_stream(
            STREAM_METHOD,
            request_serializer=None,
            response_deserializer=pb.Ack.FromString,
        )
        self.last_error: str | None = None  # of the last failed clock probe

    @classmethod
    def from_config(cls, cfg: Any, target: str = "") -> CollectorClient:
        """A client with ``cfg``'s TLS, client certificate and token (an AgentConfig);
        a file that cannot be read is a ``UsageError`` naming its option."""
        from tfprof.agent.inprocess.errors import UsageError

        if bool(cfg.tls_cert) != bool(cfg.tls_key):
            raise UsageError("TFPROF_TLS_CERT and TFPROF_TLS_KEY go together: give both")
        cert = (cfg.tls_cert, cfg.tls_key) if cfg.tls_cert else None
        try:
            return cls(target or cfg.collector, cfg.tls_ca, cfg.auth_token, cert)
        except OSError as exc:
            names = {cfg.tls_ca: "--tls-ca", cfg.tls_cert: "TFPROF_TLS_CERT"}
            option = names.get(exc.filename, "TFPROF_TLS_KEY")
            raise UsageError(f"{option} {exc.filename}: {exc.strerror}") from None

    def estimate_clock(self, samples: int = 5, timeout: float = 2.0) -> tuple[int, int] | None:
        """(offset, round trip) in ns: add offset to local time to get collector time.

        NTP's four timestamps; the sample with the lowest round trip wins because its
        one-way delays are least asymmetric.
        """
        best: tuple[int, int] | None = None
        for _ in range(samples):
            t1 = clock.now_ns()
            try:
                reply = self.stub.Clock(
                    pb.ClockRequest(t1_ns=t1), timeout=timeout, metadata=self.metadata
                )
            except grpc.RpcError as exc:
                self.last_error = describe(exc)
                return best
            offset, rtt = clock.offset_from_probe(t1, reply.t2_ns, reply.t3_ns, clock.now_ns())
            if best is None or rtt < best[1]:
                best = (offset, rtt)
        return best

    def close(self) -> None:
        self.channel.close()


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def describe(exc: grpc.RpcError) -> str:
    """What went wrong with a call, in words: ``connection refused``, ``TLS handshake
    failed ...``, else ``CODE: details`` (e.g. ``UNAUTHENTICATED: missing token``)."""
    code = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else str(exc)
    text = str(details or "")
    if code == grpc.StatusCode.UNAVAILABLE:
        lowered = text.lower()
        if "connection refused" in lowered:
            return "connection refused: is a collector listening there?"
        if "handshake" in lowered or "ssl" in lowered:
            return (
                "TLS handshake failed: give --tls-ca only for a collector that serves TLS, "
                "and the CA that signed its certificate"
            )
        if "resolv" in lowered or "lookup" in lowered:
            return "cannot resolve the host name"
        if "deadline" in lowered or "timeout" in lowered or "timed out" in lowered:
            return "no answer in time"
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return "no answer in time"
    return f"{code.name if code else 'ERROR'}: {text}"


def refused_for_size(exc: grpc.RpcError) -> bool:
    """True for a RESOURCE_EXHAUSTED that a retry cannot fix: a message over the
    collector's size limit (its own check, or gRPC's far over it). A collector at its
    stream limit answers RESOURCE_EXHAUSTED too; that one is worth retrying."""
    details = str(exc.details() if hasattr(exc, "details") else exc).lower()
    return "larger than max" in details or "over this collector's limit" in details


def check_address(address: str, flag: str = "--collector") -> None:
    """Raise ``UsageError`` naming ``flag`` unless ``address``'s host name resolves."""
    import socket

    from tfprof.agent.inprocess.errors import UsageError

    host, _, port = address.rpartition(":")
    try:
        socket.getaddrinfo(host.strip("[]"), int(port), type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise UsageError(f"{flag} {address}: cannot resolve {host} ({exc})") from None
