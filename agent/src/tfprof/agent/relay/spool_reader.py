"""Reading a spooled stream back for delivery (``tfprof-agent flush-spool``, a launcher's
or daemon's start): its hello, its batches in seq order, its goodbye, with what of the
folder could not be read. The folder stays locked while it is delivered."""

from __future__ import annotations

import fcntl
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from google.protobuf.message import DecodeError

from tfprof.core import batchlog
from tfprof.proto import collector_pb2 as pb

log = logging.getLogger("tfprof.agent.relay.spool")


@dataclass
class SpooledStream:
    """A spooled stream opened for delivery; ``lock`` is held until ``close``.

    ``problems`` says what of the folder could not be read (damaged log bytes, a torn
    goodbye): the readable rest is delivered, and the folder is kept for inspection."""

    directory: Path
    hello: pb.Hello
    target: str
    batches: list[bytes]
    goodbye: pb.Goodbye | None
    lockf: BinaryIO
    problems: list[str] = field(default_factory=list)

    def close(self) -> None:
        fcntl.flock(self.lockf, fcntl.LOCK_UN)
        self.lockf.close()


def _read_batches(directory: Path, problems: list[str]) -> list[bytes]:
    """The folder's batches in seq order, each once. A ``batches.log.tmp`` left by a
    rewrite that never finished (an older release on a full disk) is read too."""
    by_seq: dict[int, bytes] = {}
    for name in ("batches.log", "batches.log.tmp"):
        scan = batchlog.Scan(batchlog.V2, 0)
        for offset, data in batchlog.entries(batchlog.read_bytes(directory / name), 0, scan):
            try:
                seq = pb.AgentMessage.FromString(data).batch.seq
            except DecodeError:
                problems.append(f"{name}: undecodable batch at offset {offset:,}")
                continue
            by_seq.setdefault(seq, data)
        problems.extend(f"{name}: {d}" for d in scan.damage)
    return [by_seq[seq] for seq in sorted(by_seq)]


def claim(directory: Path) -> SpooledStream | None:
    """Open a spooled stream for delivery, unless its owner still holds it (or its
    hello is unreadable: then it is left alone, with a warning)."""
    lockf = open(directory / "lock", "ab")  # noqa: SIM115 - closed by SpooledStream.close
    try:
        fcntl.flock(lockf, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lockf.close()
        return None
    problems: list[str] = []
    try:
        hello = pb.Hello.FromString((directory / "hello.pb").read_bytes())
        target_path, goodbye_path = directory / "target", directory / "goodbye.pb"
        target = target_path.read_text().strip() if target_path.exists() else ""
        batches = _read_batches(directory, problems)
    except (OSError, DecodeError) as exc:
        log.warning("unreadable spool folder %s, left as it is: %s", directory, exc)
        fcntl.flock(lockf, fcntl.LOCK_UN)
        lockf.close()
        return None
    goodbye = None
    try:
        if goodbye_path.exists():
            goodbye = pb.Goodbye.FromString(goodbye_path.read_bytes())
    except (OSError, DecodeError) as exc:
        problems.append(f"goodbye.pb unreadable ({exc}): the stream stays incomplete")
    return SpooledStream(directory, hello, target, batches, goodbye, lockf, problems)
