"""The agent's on-disk spool: batches the collector has not acknowledged yet.

Layout, one folder per traced process's stream (names come from validated job names
and generated ids), under a folder per uid of the traced processes::

    <spool>/<uid>/<job>/<run_id>/<stream_id>/hello.pb    the stream's Hello (and secret)
                                             batches.log  AgentMessage batches in seq order,
                                                          one checksummed entry each
                                                          (core.batchlog)
                                             goodbye.pb   present once the job ended (atomic)
                                             target       the collector address
                                             lock         flock'ed by whoever owns the folder

Spooled batches are the user's records and the hello holds the stream's secret, so the
per-uid folders are 0700 and every file 0600, whatever the umask; a node daemon's spool
holds a folder for each uid whose processes it relays. A per-uid folder that is not
ours, not a folder or open to others is refused (a shared spool root, 1777 like /tmp,
must not let one user plant a folder for another). Folders of an older release
(``<spool>/<job>/...``) are still read and delivered.

A launcher spills to it when the collector is unreachable or slow, and leaves it behind
when the job ends before delivery. ``tfprof-agent flush-spool``, or the next launcher on
the host, delivers it; the collector ignores sequence numbers it already stored, so a
batch delivered twice is stored once.

A full disk (ENOSPC) is treated like the ``max_bytes`` limit: the batch that did not fit
is counted as dropped, the partial entry is cut off, and what the spool already holds
stays readable. A folder is deleted only once everything in it was delivered.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import logging
import os
import shutil
import stat
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO, Protocol, TypeVar

from tfprof.core import batchlog
from tfprof.proto import collector_pb2 as pb

log = logging.getLogger("tfprof.agent.relay.spool")

STREAM_SECRET_BYTES = 32  # what a relay makes for each stream (Hello.stream_secret)


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

    def reserve(self, nbytes: int, force: bool = False) -> bool:
        """Account for ``nbytes`` more on disk; False when that would pass the limit
        (``force``: bytes that are on disk already)."""
        with self._lock:
            used = self._used_bytes()
            if used + nbytes > self.max_bytes and not force:
                return False
            self._used = used + nbytes
            return True

    def release(self, nbytes: int) -> None:
        with self._lock:
            self._used = max(0, self._used_bytes() - nbytes)

    def uid_dir(self, uid: int) -> Path:
        """The spool folder of ``uid``'s streams, made 0700 if missing; ``OSError`` when
        the one there is not ours to use."""
        if not self.root.exists():
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        folder = self.root / str(uid)
        try:
            folder.mkdir(mode=0o700)
            os.chmod(folder, 0o700)  # mkdir's mode is cut by the umask
        except FileExistsError:
            pass
        st = os.lstat(folder)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise PermissionError(
                f"spool folder {folder} is not a private folder of this user (mode "
                f"{stat.filemode(st.st_mode)}, owner uid {st.st_uid}): not used"
            )
        return folder

    def stream_dir(self, hello: pb.Hello) -> Path:
        uid = hello.uid if hello.HasField("uid") else os.geteuid()
        return self.uid_dir(uid) / hello.job / hello.run_id / hello.stream_id

    def open_stream(self, hello: pb.Hello, target: str) -> SpoolFile:
        return SpoolFile(self, self.stream_dir(hello), hello, target)

    def pending_streams(self) -> Iterator[Path]:
        if not self.root.is_dir():
            return
        # <uid>/<job>/<run>/<stream>, and <job>/<run>/<stream> of older releases.
        found = [*self.root.glob("*/*/*/*/hello.pb"), *self.root.glob("*/*/*/hello.pb")]
        for hello in sorted(found):
            yield hello.parent


def private_open(path: Path, flags: int) -> int:
    """``os.open`` of a file only its owner may read (0600, whatever the umask)."""
    return os.open(path, flags | os.O_CLOEXEC, 0o600)


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` all at once: a crash or a full disk leaves the old file or none,
    never a torn one."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        fd = private_open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        with open(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


class SpoolFile:
    """One stream's spooled batches; holds the folder's lock while open."""

    def __init__(self, spool: Spool, directory: Path, hello: pb.Hello, target: str) -> None:
        self.spool = spool
        self.directory = directory
        for folder in (directory.parent.parent, directory.parent, directory):
            folder.mkdir(mode=0o700, exist_ok=True)
        lock_fd = private_open(directory / "lock", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        self._lockf = open(lock_fd, "a")  # noqa: SIM115 - held until close
        fcntl.flock(self._lockf, fcntl.LOCK_EX)
        try:
            files = (("hello.pb", hello.SerializeToString()), ("target", target.encode()))
            for name, data in files:
                path = directory / name
                if not path.exists():
                    write_atomic(path, data)
            self._log, self._version = self._open_log()
        except OSError:
            self._unlock()
            raise
        self._reader: BinaryIO | None = None
        self._disk_full = False

    def _open_log(self) -> tuple[io.FileIO, int]:
        # Unbuffered: a write the disk refuses must leave nothing behind in a buffer.
        path = self.directory / "batches.log"
        os.close(private_open(path, os.O_WRONLY | os.O_CREAT))  # made 0600 before use
        f, version = batchlog.open_for_append(path)
        f.close()
        return open(path, "ab", buffering=0), version

    def append(self, data: bytes) -> int | None:
        """Append a serialized batch; its offset, or None when the spool is full (its
        limit, or the disk: ENOSPC). A full disk leaves no partial entry behind."""
        entry = batchlog.encode(data, self._version)
        if not self.spool.reserve(len(entry)):
            return None
        offset = self._log.tell()
        try:
            view = memoryview(entry)
            while view:
                view = view[self._log.write(view) or 0 :]
        except OSError as exc:
            self.spool.release(len(entry))
            with contextlib.suppress(OSError):
                os.ftruncate(self._log.fileno(), offset)
                self._log.seek(offset)
            if not self._disk_full:  # once per stream, not per batch
                self._disk_full = True
                log.warning("the spool in %s is full (%s): batches are dropped and counted",
                            self.spool.root, exc.strerror or exc)  # fmt: skip
            return None
        return offset

    def read(self, offset: int) -> bytes:
        if self._reader is None:
            self._reader = open(self.directory / "batches.log", "rb")  # noqa: SIM115
        return batchlog.read_entry(self._reader, offset, self._version)

    def rewrite(self, batches: list[bytes]) -> int:
        """Replace the log with what is still undelivered, as much as the spool limit
        allows; returns how many of ``batches`` (a prefix, to keep order) were kept.

        A full disk (OSError) leaves the old log in place, open for appends."""
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        old = self._log.tell()
        self.spool.release(old)  # the new log replaces the old one
        tmp = self.directory / "batches.log.tmp"
        kept = reserved = 0
        try:
            with open(private_open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "wb") as f:
                f.write(batchlog.MAGIC)
                for data in batches:
                    entry = batchlog.encode(data)
                    if not self.spool.reserve(len(entry)):
                        break
                    reserved += len(entry)
                    f.write(entry)
                    kept += 1
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.directory / "batches.log")
        except OSError:
            self.spool.release(reserved)
            self.spool.reserve(old, force=True)  # the old log stays
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        self._log.close()
        self._log, self._version = self._open_log()
        return kept

    def cut_to(self, offset: int) -> None:
        """Drop the log's entries from ``offset`` on: room for the goodbye on a full
        disk, whose counts matter more than the batches they displace."""
        size = self._log.seek(0, os.SEEK_END)
        os.ftruncate(self._log.fileno(), offset)
        self._log.seek(offset)
        self.spool.release(max(0, size - offset))

    def write_goodbye(self, goodbye: pb.Goodbye) -> None:
        write_atomic(self.directory / "goodbye.pb", goodbye.SerializeToString())

    def _unlock(self) -> None:
        fcntl.flock(self._lockf, fcntl.LOCK_UN)
        self._lockf.close()

    def close(self) -> None:
        self._log.close()
        if self._reader is not None:
            self._reader.close()
        self._unlock()

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


class Leftover(Protocol):
    """An undelivered batch at the job's end: in memory (``data``) or already in the
    spool's log at ``offset``."""

    records: int
    data: bytes | None
    offset: int
    samples: int  # Python stack samples: counted in the goodbye apart from records


L = TypeVar("L", bound=Leftover)


def keep_leftovers(
    spool_file: SpoolFile, batches: Sequence[L], goodbye: pb.Goodbye | None
) -> list[L]:
    """Leave ``batches`` in the spool and close it; returns those kept. The goodbye is
    written with every record that could not be kept added to its ``dropped_relay``."""
    try:
        placed = _place(spool_file, batches)
        if goodbye is not None:
            placed = _write_goodbye(spool_file, placed, batches, goodbye)
    finally:
        spool_file.close()
    return [b for _, b in placed]


def _place(spool_file: SpoolFile, batches: Sequence[L]) -> list[tuple[int, L]]:
    """Replace the log with ``batches``, as many as fit: (offset, batch) of each kept.
    Where the disk has no room for a new log, the old one (what spilled) stays and the
    rest is appended to it as far as it goes (readers put batches back in seq order)."""
    try:
        data = [b.data if b.data is not None else spool_file.read(b.offset) for b in batches]
        kept = spool_file.rewrite(data)
    except (OSError, ValueError) as exc:
        log.warning("cannot rewrite the spool (%s); keeping what it holds", exc)
        placed = [(b.offset, b) for b in batches if b.data is None]
        for b in batches:
            if b.data is not None:
                offset = spool_file.append(b.data)
                if offset is None:
                    break
                placed.append((offset, b))
        return sorted(placed, key=lambda p: p[0])
    offset, placed = len(batchlog.MAGIC), []
    for b, d in zip(batches[:kept], data, strict=False):
        placed.append((offset, b))
        offset += batchlog.entry_size(len(d))
    return placed


def _write_goodbye(
    spool_file: SpoolFile, placed: list[tuple[int, L]], batches: Sequence[L], goodbye: pb.Goodbye
) -> list[tuple[int, L]]:
    """On a full disk, batches give way to the goodbye, last first: its counts say what
    was lost, the batches only what it was."""
    base, total = goodbye.dropped_relay, sum(b.records for b in batches)
    base_samples, samples = goodbye.dropped_stack_samples, sum(b.samples for b in batches)
    while True:
        goodbye.dropped_relay = base + total - sum(b.records for _, b in placed)
        goodbye.dropped_stack_samples = base_samples + samples - sum(b.samples for _, b in placed)
        try:
            spool_file.write_goodbye(goodbye)
            return placed
        except OSError as exc:
            if not placed:
                log.warning("cannot write the spooled stream's goodbye: %s", exc)
                return placed
            spool_file.cut_to(placed.pop()[0])
