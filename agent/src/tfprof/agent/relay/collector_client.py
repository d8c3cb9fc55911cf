"""The launcher's channel to a collector: TLS and token settings, clock probing, and the
raw ``Stream`` call that ``delivery.StreamDelivery`` drives, one per traced process.

Runs in the launcher, never in the user's process.
"""

from __future__ import annotations

import grpc

from tfprof.agent.inprocess import clock
from tfprof.proto import collector_pb2 as pb
from tfprof.proto import collector_pb2_grpc as pb_grpc

MAX_MESSAGE_BYTES = 64 << 20
BACKOFF_MAX_S = 5.0  # the longest wait between reconnection attempts
STREAM_METHOD = "/{}/Stream".format(pb.DESCRIPTOR.services_by_name["Collector"].full_name)


class CollectorClient:
    """A channel to one collector, with TLS and bearer-token settings applied."""

    def __init__(self, target: str, tls_ca: str = "", auth_token: str = "") -> None:
        self.target = target
        options = [
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            # Reconnect quickly after a collector restart; the stream logic backs off.
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", int(BACKOFF_MAX_S * 1000)),
        ]
        if tls_ca:
            with open(tls_ca, "rb") as f:
                creds = grpc.ssl_channel_credentials(root_certificates=f.read())
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
