"""Client commands' channel to a running collector (``capture``, ``captures``, ``top``,
``export --collector``): TLS and bearer token applied, a failed call turned into one
``tfprof-collector:`` line, and an exported trace received. The options that reach it
are ``remote_options``' (no gRPC: every command's parser is built for every command).

The token is read from a file (``--auth-token-file``), never from the command line,
where other users of the host could read it.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import grpc

from tfprof.collector.config import DEFAULT_COLLECTOR, read_file_text, read_token
from tfprof.collector.errors import CollectorError, InvalidArgument, NotFound, PathError
from tfprof.proto import collector_pb2 as pb
from tfprof.proto import collector_pb2_grpc as pb_grpc

Metadata = tuple[tuple[str, str], ...]


class Unreachable(CollectorError):
    """No collector answered at the address (exit status 1: try again later)."""


def open_remote(args: argparse.Namespace) -> Remote:
    """A channel to ``args.collector`` (else the default address) with its credentials."""
    from tfprof.collector.config import check_collector_address, client_auth_token_file

    address = check_collector_address(args.collector or DEFAULT_COLLECTOR)
    token_file = args.auth_token_file
    if token_file is None:
        token_file = client_auth_token_file()
    return Remote(address, args.tls_ca, token_file)


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


def download_export(remote: Remote, request: pb.ExportRequest, output: str) -> tuple[Path, int]:
    """Write the trace the collector streams for ``request`` to ``output`` (a file, or
    for xplane a log dir); whole or not at all, as ``export`` writes locally. Returns
    the file written and its slices."""
    from tfprof.collector.terminal import progress

    into_dir = request.format == "xplane" and not output.lower().endswith(".xplane.pb")
    base = Path(output)
    if into_dir:
        partial = base / f".export.partial-{os.getpid()}"
    else:
        partial = base.with_name(f".{base.name}.partial-{os.getpid()}")
    try:
        if into_dir:
            base.mkdir(parents=True, exist_ok=True)
        done = None
        with open(partial, "wb") as out, progress(f"receiving {output}", unit="bytes") as advance:
            for chunk in remote.stub.Export(request, metadata=remote.metadata):
                if chunk.HasField("done"):
                    done = chunk.done
                else:
                    out.write(chunk.data)
                    advance(len(chunk.data))
        if done is None:
            raise CollectorError(f"export: {remote.address} ended the trace before its end")
        relative = Path(done.path)
        if relative.is_absolute() or ".." in relative.parts:
            raise CollectorError(f"export: {remote.address} named a file outside {output}")
        target = base / relative if into_dir and done.path else base
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(partial, target)
        return target, done.slices
    except grpc.RpcError as exc:
        partial.unlink(missing_ok=True)
        raise remote.error(exc, "export") from None
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise PathError.from_os("output", output, exc) from exc
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
