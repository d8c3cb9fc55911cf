"""Delivering spooled streams: ``tfprof-agent flush-spool`` and each launcher's start."""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field

from tfprof.agent.relay.collector_client import CollectorClient
from tfprof.agent.relay.delivery import StreamDelivery
from tfprof.agent.relay.spool import STREAM_SECRET_BYTES, Spool
from tfprof.agent.relay.spool_reader import claim
from tfprof.core.version import PROTOCOL_VERSION
from tfprof.proto import collector_pb2 as pb

log = logging.getLogger("tfprof.agent.relay.flush")


@dataclass
class FlushResult:
    delivered_streams: int = 0
    delivered_records: int = 0
    left: list[str] = field(default_factory=list)  # folders still waiting, and why


def upgraded(hello: pb.Hello) -> pb.Hello:
    """A hello an older release spooled, in this release's protocol: the batches are the
    same; it gets the stream secret it lacks (a collector binds the stream to the first
    secret it sees: an older collector's stream without one takes this one)."""
    if hello.protocol_version == PROTOCOL_VERSION and hello.stream_secret:
        return hello
    new = pb.Hello()
    new.CopyFrom(hello)
    new.protocol_version = PROTOCOL_VERSION
    if not new.stream_secret:
        new.stream_secret = os.urandom(STREAM_SECRET_BYTES)
    return new


def flush_spool(
    spool: Spool,
    make_client: Callable[[str], CollectorClient],
    target: str | None = None,
    only_target: bool = False,
    timeout: float = 60.0,
) -> FlushResult:
    """Deliver every spooled stream nobody else holds.

    ``target`` overrides each stream's recorded collector; with ``only_target`` the
    streams recorded for other collectors are left alone (a launcher flushing on start).
    A folder is deleted only when all of it was read and delivered; one that is partly
    unreadable is delivered as far as it reads and kept (listed in ``left``).
    """
    result = FlushResult()
    clients: dict[str, CollectorClient] = {}
    try:
        for directory in list(spool.pending_streams()):
            stream = claim(directory)
            if stream is None:
                continue  # a running launcher owns it
            try:
                address = target or stream.target
                if only_target and stream.target != target:
                    continue
                if not address:
                    result.left.append(f"{directory} (no collector address recorded)")
                    continue
                client = clients.get(address) or clients.setdefault(address, make_client(address))
                delivery = StreamDelivery(client, upgraded(stream.hello))
                records = delivery.resume(stream.batches)
                if not delivery.finish(stream.goodbye, timeout):
                    result.left.append(f"{directory} ({delivery.last_error or 'not delivered'})")
                    continue
                result.delivered_streams += 1
                result.delivered_records += records
                if stream.problems:
                    # Delivered what could be read; the rest stays for a person to see.
                    why = "; ".join(stream.problems)
                    log.warning("spooled stream %s delivered in part, kept: %s", directory, why)
                    result.left.append(f"{directory} (kept, partly unreadable: {why})")
                    continue
                size = sum(f.stat().st_size for f in directory.iterdir() if f.is_file())
                shutil.rmtree(directory, ignore_errors=True)
                spool.release(size)
                log.info("delivered spooled stream %s (%d records)", directory, records)
            finally:
                stream.close()
    finally:
        for client in clients.values():
            client.close()
    _prune_empty(spool)
    return result


def _prune_empty(spool: Spool) -> None:
    """Remove the empty folders a delivered stream leaves (its run, job and uid folders;
    never the spool root)."""
    if not spool.root.is_dir():
        return
    for pattern in ("*/*/*", "*/*", "*"):
        for folder in sorted(spool.root.glob(pattern), reverse=True):
            if folder.is_dir() and not folder.is_symlink():
                try:
                    folder.rmdir()  # only when empty
                except OSError:
                    pass
