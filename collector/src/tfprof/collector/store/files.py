"""File-system steps the store relies on: durable replaces, the stream lock, sizes."""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from pathlib import Path


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` all at once; ``durable``: survive a host crash."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        if durable:
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if durable:
        fsync_dir(path.parent)


def flock_within(fd: int, timeout: float) -> bool:
    """Take the exclusive lock, waiting up to ``timeout`` for a previous holder that is
    going away (a collector still tearing down a call when its successor starts)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)


def is_streaming(directory: Path) -> bool:
    """Whether a live collector holds the stream open (its flock on batches.log)."""
    try:
        fd = os.open(directory / "batches.log", os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops our own shared lock, if we got it
    return False


# A stream's compaction watermark (tfprof.collector.lake.segments). It is bookkeeping
# about data, not data: compacting an idle run must not make it look recently written.
WATERMARK = "lake.json"
NOT_WRITES = frozenset({WATERMARK, WATERMARK + ".tmp"})


def size_and_mtime(tree: Path) -> tuple[int, float]:
    """Bytes of every file under ``tree`` and the newest mtime (seconds since 1970) of
    its data (``NOT_WRITES`` left out of the mtime)."""
    size, newest = 0, 0.0
    for dirpath, _dirs, files in os.walk(tree):
        for name in files:
            with contextlib.suppress(OSError):  # a file deleted while we walk
                st = os.lstat(os.path.join(dirpath, name))
                size += st.st_size
                if name not in NOT_WRITES:
                    newest = max(newest, st.st_mtime)
    return size, newest
