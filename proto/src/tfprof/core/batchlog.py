"""Append-only logs of serialized protobuf messages: a u32 length, then the bytes.

The collector stores each stream's batches this way and the agent's spool keeps
undelivered batches in the same form. A torn final entry (a crash mid-write) is not an
entry: readers stop before it and writers cut it off before appending.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

LENGTH = struct.Struct("<I")


def entries(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(offset, payload) of every complete entry."""
    offset = 0
    while offset + LENGTH.size <= len(data):
        (length,) = LENGTH.unpack_from(data, offset)
        end = offset + LENGTH.size + length
        if end > len(data):
            return
        yield offset, data[offset + LENGTH.size : end]
        offset = end


def read(path: str | os.PathLike[str], offset: int = 0) -> Iterator[bytes]:
    """Payloads of the complete entries from ``offset`` (an entry boundary) on."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return
    for _, payload in entries(data):
        yield payload


def complete_length(path: str | os.PathLike[str]) -> int:
    """Bytes of the file that hold complete entries."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return 0
    end = 0
    for offset, payload in entries(data):
        end = offset + LENGTH.size + len(payload)
    return end


def open_for_append(path: str | os.PathLike[str]) -> BinaryIO:
    """Open for appending after cutting off a torn tail."""
    keep = complete_length(path)
    f = open(path, "ab")  # noqa: SIM115 - the caller owns the handle
    if f.tell() != keep:
        f.truncate(keep)
        f.seek(keep)
    return f


def append(f: BinaryIO, payload: bytes) -> int:
    """Write one entry; returns the bytes written."""
    f.write(LENGTH.pack(len(payload)) + payload)
    return LENGTH.size + len(payload)
