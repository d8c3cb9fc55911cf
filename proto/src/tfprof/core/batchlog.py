"""Append-only logs of serialized protobuf messages, each entry checksummed.

The collector stores each stream's batches this way and the agent's spool keeps
undelivered batches in the same form.

Format 2 (written by this release): the file starts with ``MAGIC``; each entry is a
sync mark, a u32 length, a u32 zlib.crc32 of (length, payload), then the payload. A
damaged entry fails its checksum and the reader finds the next entry by its mark, so
one bad byte costs one batch, never the rest of the file.

Format 1 (older releases): no header, each entry a u32 length then the payload. It is
still read, and appended to in its own format, so old data dirs and spools keep working.

A torn final entry (a crash mid-write) is not an entry: readers report it and writers
cut it off before appending. Every skipped byte range is reported as a ``Damage``.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

MAGIC = b"\x89TFPLOG2"
MARK = b"\xe7\x1b\x5c\xa3"
LENGTH = struct.Struct("<I")  # format 1 entry header
HEADER = struct.Struct("<4sII")  # format 2 entry header: mark, length, crc32
V1, V2 = 1, 2
# An entry longer than this is a damaged length, not a batch (the collector takes
# messages of at most 64 MiB).
MAX_ENTRY = 1 << 30


@dataclass(frozen=True)
class Damage:
    """Bytes of a log that hold no readable entry."""

    offset: int
    nbytes: int
    reason: str  # "checksum mismatch", "torn tail", "unreadable length"

    def __str__(self) -> str:
        return f"{self.nbytes:,} bytes at offset {self.offset:,} ({self.reason})"


@dataclass
class Scan:
    """What ``scan`` found: ``end`` is where the last good entry ends."""

    version: int
    end: int
    damage: list[Damage] = field(default_factory=list)


def version_of(data: bytes) -> int:
    return V2 if data.startswith(MAGIC) else V1


def file_version(path: str | os.PathLike[str]) -> int:
    with open(path, "rb") as f:
        return version_of(f.read(len(MAGIC)))


def _crc(length: int, payload: bytes | memoryview) -> int:
    return zlib.crc32(payload, zlib.crc32(LENGTH.pack(length)))


def entries(data: bytes, start: int = 0, scan: Scan | None = None) -> Iterator[tuple[int, bytes]]:
    """(offset, payload) of every good entry from ``start`` (0 or an entry boundary);
    ``scan``, when given, collects the damage found and the end of the last good entry."""
    version = version_of(data)
    result = scan if scan is not None else Scan(version, 0)
    result.version = version
    offset = max(start, len(MAGIC) if version == V2 else 0)
    result.end = offset
    if version == V1:
        yield from _entries_v1(data, offset, result)
    else:
        yield from _entries_v2(data, offset, result)


def _entries_v1(data: bytes, offset: int, scan: Scan) -> Iterator[tuple[int, bytes]]:
    while offset + LENGTH.size <= len(data):
        (length,) = LENGTH.unpack_from(data, offset)
        end = offset + LENGTH.size + length
        if end > len(data):
            break
        yield offset, data[offset + LENGTH.size : end]
        offset = scan.end = end
    if offset < len(data):
        scan.damage.append(Damage(offset, len(data) - offset, "torn tail"))


def _entries_v2(data: bytes, offset: int, scan: Scan) -> Iterator[tuple[int, bytes]]:
    view = memoryview(data)
    bad_from: int | None = None  # start of the damaged run we are skipping
    while offset < len(data):
        good = False
        end = len(data)
        if offset + HEADER.size <= len(data):
            mark, length, crc = HEADER.unpack_from(data, offset)
            end = offset + HEADER.size + length
            if mark == MARK and length <= MAX_ENTRY and end <= len(data):
                good = _crc(length, view[offset + HEADER.size : end]) == crc
        if good:
            if bad_from is not None:
                scan.damage.append(Damage(bad_from, offset - bad_from, "checksum mismatch"))
                bad_from = None
            yield offset, data[offset + HEADER.size : end]
            offset = scan.end = end
            continue
        if bad_from is None:
            bad_from = offset
        found = data.find(MARK, offset + 1)
        if found < 0:
            break
        offset = found
    if bad_from is not None:
        # Nothing good after it: a write that never finished, unless it is long.
        torn = len(data) - bad_from <= HEADER.size or data.find(MARK, bad_from + 1) < 0
        reason = "torn tail" if torn else "checksum mismatch"
        scan.damage.append(Damage(bad_from, len(data) - bad_from, reason))


def read_bytes(path: str | os.PathLike[str]) -> bytes:
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        return b""


def read(
    path: str | os.PathLike[str], offset: int = 0, scan: Scan | None = None
) -> Iterator[bytes]:
    """Payloads of the good entries from ``offset`` (0 or an entry boundary) on."""
    for _, payload in entries(read_bytes(path), offset, scan):
        yield payload


def scan_file(path: str | os.PathLike[str]) -> Scan:
    """The file's format, damage and good end, without keeping the payloads."""
    scan = Scan(V2, 0)
    for _ in entries(read_bytes(path), 0, scan):
        pass
    return scan


def open_for_append(path: str | os.PathLike[str]) -> tuple[BinaryIO, int]:
    """Open for appending after cutting off a torn tail; (file, format version).

    A new or empty file gets format 2; an existing file keeps its format."""
    scan = scan_file(path)
    f = open(path, "ab")  # noqa: SIM115 - the caller owns the handle
    if f.tell() == 0:
        f.write(MAGIC)
        f.flush()
        return f, V2
    keep = f.tell()
    if scan.damage and scan.damage[-1].reason == "torn tail":
        keep = scan.damage[-1].offset  # damage in the middle stays for the reader to report
    if f.tell() != keep:
        f.truncate(keep)
        f.seek(keep)
    return f, scan.version


def encode(payload: bytes, version: int = V2) -> bytes:
    """One entry, ready to write."""
    if version == V1:
        return LENGTH.pack(len(payload)) + payload
    return HEADER.pack(MARK, len(payload), _crc(len(payload), payload)) + payload


def entry_size(payload_len: int, version: int = V2) -> int:
    return payload_len + (LENGTH.size if version == V1 else HEADER.size)


def append(f: BinaryIO, payload: bytes, version: int = V2) -> int:
    """Write one entry; returns the bytes written."""
    entry = encode(payload, version)
    f.write(entry)
    return len(entry)


def read_entry(f: BinaryIO, offset: int, version: int = V2) -> bytes:
    """The payload of the entry at ``offset``; ValueError when it is damaged."""
    f.seek(offset)
    if version == V1:
        (length,) = LENGTH.unpack(f.read(LENGTH.size))
        return f.read(length)
    mark, length, crc = HEADER.unpack(f.read(HEADER.size))
    payload = f.read(length) if mark == MARK and length <= MAX_ENTRY else b""
    if mark != MARK or len(payload) != length or _crc(length, payload) != crc:
        raise ValueError(f"damaged log entry at offset {offset}")
    return payload
