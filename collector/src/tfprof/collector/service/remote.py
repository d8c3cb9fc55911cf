"""Client commands' channel to a running collector (``capture``, ``captures``): TLS and
bearer token applied, and a failed call turned into one ``tfprof-collector:`` line.

The token is read from a file (``--auth-token-file``), never from the command line,
where other users of the host could read it.
"""

from __future__ import annotations

import grpc

from tfprof.collector.config import read_file_text, read_token
from tfprof.collector.errors import CollectorError, InvalidArgument, NotFound
from tfprof.proto import collector_pb2_grpc as pb_grpc

Metadata = tuple[tuple[str, str], ...]


class Unreachable(CollectorError):
    """No collector answered at the address (exit status 1: try again later)."""


class Remote:
    """A stub on a channel to ``address``; use as a context manager."""

    def __init__(self, address: str, tls_ca: str = "", auth_token_file: str = "") -> None:
        self.address = address
        if tls_ca:
            creds = grpc.ssl_channel_credentials(root_certificates=read_file_text("CA", tls_ca))
            self.channel = grpc.secure_channel(address, creds)
        else:
            self.channel = grpc.insecure_channel(address)
        token = read_token(auth_token_file) if auth_token_file else ""
        self.metadata: Metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self.stub = pb_grpc.CollectorStub(self.channel)

    def __enter__(self) -> Remote:
        return self

    def __exit__(self, *exc: object) -> None:
        self.channel.close()

    def error(self, exc: grpc.RpcError, what: str) -> CollectorError:
        """The one-line error for a failed call."""
        code = exc.code() if hasattr(exc, "code") else None
        details = exc.details() if hasattr(exc, "details") else str(exc)
        if code == grpc.StatusCode.NOT_FOUND:
            return NotFound(f"{what}: {details}")
        if code == grpc.StatusCode.INVALID_ARGUMENT:
            return InvalidArgument(f"{what}: {details}")
        if code == grpc.StatusCode.UNAUTHENTICATED:
            return InvalidArgument(
                f"{what}: the collector at {self.address} refused: {details} (give "
                "--auth-token-file with the collector's token)"
            )
        if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            return Unreachable(f"{what}: no collector answers at {self.address} ({details})")
        name = code.name if code else "ERROR"
        return CollectorError(f"{what}: {name}: {details}")
