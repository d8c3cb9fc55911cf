"""File-system steps the store relies on: durable replaces, the stream lock, sizes, and
the modes of what it makes.

A data dir holds every user's records (and their command lines), so it is readable by
its owner and a configured group only: folders ``DIR_MODE`` (0750), files ``FILE_MODE``
(0640), set explicitly whatever the process's umask (the collector embedded in a
launcher runs with the user's). ``serve --data-group`` gives the data dir a group and
the set-group-id bit, so everything made under it inherits that group.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from pathlib import Path
from typing import BinaryIO

DIR_MODE = 0o750
FILE_MODE = 0o640


def make_dirs(path: Path, root: Path) -> bool:
    """Make ``path`` and its missing parents below ``root`` with ``DIR_MODE`` (mkdir's
    ``parents=True`` would give them the umask's); True when ``path`` was made. The
    set-group-id bit of ``root`` (``--data-group``) is kept on each new folder."""
    missing = []
    folder = path
    while folder != root and not folder.exists():
        missing.append(folder)
        folder = folder.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=DIR_MODE)
        except FileExistsError:
            continue  # made by a concurrent open of a sibling stream
        mode = DIR_MODE | (os.stat(folder.parent).st_mode & 0o2000)
        os.chmod(folder, mode)  # mkdir's mode is cut by the umask
    if not path.exists():
        path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    return bool(missing)


def open_for_append(path: Path) -> BinaryIO:
    """``path`` opened for appends, made with ``FILE_MODE`` if missing."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, FILE_MODE)
    return open(fd, "ab")


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` all at once; ``durable``: survive a host crash."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, FILE_MODE)
    with open(fd, "wb") as f:
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
