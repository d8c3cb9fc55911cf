"""The agent's on-disk spool: batches the collector has not acknowledged yet.

Layout, one folder per traced process's stream (names come from validated job names
and generated ids)::

    <spool>/<job>/<run_id>/<stream_id>/hello.pb      the stream's Hello
                                        batches.log   u32 length + AgentMessage (a batch),
                                                      in seq order
                                        goodbye.pb    present once the job ended
                                        target        the collector address
                                        lock          flock'ed by whoever owns the folder

A launcher spills to it when the collector is unreachable or slow, and leaves it behind
when the job ends before delivery. ``tfprof-agent flush-spool``, or the next launcher on
the host, delivers it; the collector ignores sequence numbers it already stored, so a
batch delivered twice is stored once.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from tfprof.core import batchlog
from tfprof.proto import collector_pb2 as pb

log = logging.getLogger("tfprof.agent.spool")


def _dir_bytes(root: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(root):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(dirpath, name))
            except OSError:
                pass
    return total


class Spool:
    """A bounded spool folder shared by every stream of this launcher."""

    def __init__(self, root: str | os.PathLike[str], max_bytes: int) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._used: int | None = None

    def _used_bytes(self) -> int:
        if self._used is None:
            self._used = _dir_bytes(self.root) if self.root.exists() else 0
        return self._used

    def reserve(self, nbytes: int) -> bool:
        """Account for ``nbytes`` more on disk; False when that would pass the limit."""
        with self._lock:
            used = self._used_bytes()
            if used + nbytes > self.max_bytes:
                return False
            self._used = used + nbytes
            return True

    def release(self, nbytes: int) -> None:
        with self._lock:
            self._used = max(0, self._used_bytes() - nbytes)

    def stream_dir(self, hello: pb.Hello) -> Path:
        return self.root / hello.job / hello.run_id / hello.stream_id

    def open_stream(self, hello: pb.Hello, target: str) -> SpoolFile:
        return SpoolFile(self, self.stream_dir(hello), hello, target)

    def pending_streams(self) -> Iterator[Path]:
        if not self.root.is_dir():
            return
        for hello in sorted(self.root.glob("*/*/*/hello.pb")):
            yield hello.parent


class SpoolFile:
    """One stream's spooled batches; holds the folder's lock while open."""

    def __init__(self, spool: Spool, directory: Path, hello: pb.Hello, target: str) -> None:
        self.spool = spool
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._lockf = open(directory / "lock", "a")  # noqa: SIM115 - held until close
        fcntl.flock(self._lockf, fcntl.LOCK_EX)
        for name, data in (("hello.pb", hello.SerializeToString()), ("target", target.encode())):
            path = directory / name
            if not path.exists():
                path.write_bytes(data)
        self._log: BinaryIO = batchlog.open_for_append(directory / "batches.log")
        self._reader: BinaryIO | None = None

    def append(self, data: bytes) -> int | None:
        """Append a serialized batch; its offset, or None when the spool is full."""
        if not self.spool.reserve(batchlog.LENGTH.size + len(data)):
            return None
        offset = self._log.tell()
        batchlog.append(self._log, data)
        self._log.flush()
        return offset

    def read(self, offset: int) -> bytes:
        if self._reader is None:
            self._reader = open(self.directory / "batches.log", "rb")  # noqa: SIM115
        self._reader.seek(offset)
        (length,) = batchlog.LENGTH.unpack(self._reader.read(batchlog.LENGTH.size))
        return self._reader.read(length)

    def rewrite(self, batches: list[bytes]) -> int:
        """Replace the log with what is still undelivered, as much as the spool limit
        allows; returns how many of ``batches`` (a prefix, to keep order) were kept."""
        old = self._log.tell()
        self._log.close()
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        self.spool.release(old)
        tmp = self.directory / "batches.log.tmp"
        kept = 0
        with open(tmp, "wb") as f:
            for data in batches:
                if not self.spool.reserve(batchlog.LENGTH.size + len(data)):
                    break
                batchlog.append(f, data)
                kept += 1
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.directory / "batches.log")
        self._log = batchlog.open_for_append(self.directory / "batches.log")
        return kept

    def write_goodbye(self, goodbye: pb.Goodbye) -> None:
        (self.directory / "goodbye.pb").write_bytes(goodbye.SerializeToString())

    def close(self) -> None:
        self._log.close()
        if self._reader is not None:
            self._reader.close()
        fcntl.flock(self._lockf, fcntl.LOCK_UN)
        self._lockf.close()

    def remove(self) -> None:
        """Delete the folder (everything in it was delivered)."""
        size = _dir_bytes(self.directory)
        self.close()
        shutil.rmtree(self.directory, ignore_errors=True)
        self.spool.release(size)
        for parent in (self.directory.parent, self.directory.parent.parent):
            try:
                parent.rmdir()  # only when empty
            except OSError:
                break


@dataclass
class SpooledStream:
    """A spooled stream opened for delivery; ``lock`` is held until ``close``."""

    directory: Path
    hello: pb.Hello
    target: str
    batches: list[bytes]
    goodbye: pb.Goodbye | None
    lockf: BinaryIO

    def close(self) -> None:
        fcntl.flock(self.lockf, fcntl.LOCK_UN)
        self.lockf.close()


def claim(directory: Path) -> SpooledStream | None:
    """Open a spooled stream for delivery, unless its owner still holds it."""
    lockf = open(directory / "lock", "ab")  # noqa: SIM115 - closed by SpooledStream.close
    try:
        fcntl.flock(lockf, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lockf.close()
        return None
    try:
        hello = pb.Hello.FromString((directory / "hello.pb").read_bytes())
        target_path, goodbye_path = directory / "target", directory / "goodbye.pb"
        target = target_path.read_text().strip() if target_path.exists() else ""
        batches = list(batchlog.read(directory / "batches.log"))
        goodbye = (
            pb.Goodbye.FromString(goodbye_path.read_bytes()) if goodbye_path.exists() else None
        )
    except (OSError, ValueError) as exc:
        log.warning("unreadable spool folder %s: %s", directory, exc)
        fcntl.flock(lockf, fcntl.LOCK_UN)
        lockf.close()
        return None
    return SpooledStream(directory, hello, target, batches, goodbye, lockf)
