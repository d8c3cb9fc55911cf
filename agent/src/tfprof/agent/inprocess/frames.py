"""Frames: what the in-process hook sends to the launcher over its Unix socket.

This module is imported inside every traced process, so it uses the standard library
only. A frame is a 5-byte header (type, payload length) and a payload. Record frames are
columnar: one little-endian int64 array per column, in the order of ``COLUMNS``, which
mirrors the ``Records`` message of the tfprof.v1 wire. The launcher turns them into
protobuf batches; nothing in the user's process touches protobuf or gRPC.
"""

from __future__ import annotations

import array
import json
import struct
import sys
import threading
from collections.abc import Iterable
from enum import IntEnum
from typing import Any

from tfprof.core.code_stacks import FRAME_COLUMNS, NODE_COLUMNS, SAMPLE_COLUMNS, StackBatch
from tfprof.core.records import NUM_COLUMNS, RecordTable


class FrameType(IntEnum):
    HELLO = 1  # JSON: process identity, clock snapshot
    RECORDS = 2  # binary: new strings + columnar records
    DEVICES = 3  # JSON list of DeviceInfo
    GOODBYE = 4  # JSON: final counts
    # Launcher -> hook, the one frame that travels the other way: a capture window,
    # JSON {capture_id, start_realtime_ns (this host's realtime clock), duration_ns,
    # and for a capture by steps steps, skip_steps}.
    CAPTURE = 5
    STACKS = 6  # binary: new strings, frames and stack nodes, stack samples (code_stacks)
    # Hook -> launcher: capturing turned on or off, JSON {on, at_ns (realtime clock)}:
    # the windows as the hook opened them, so analyses count only captured time.
    WINDOW = 7


HEADER = struct.Struct("<BI")
# dropped-so-far, string_base, length of the JSON string list, record count
RECORDS_HEADER = struct.Struct("<QIII")
# What a relay reads of one frame, judged from the header before a byte of payload is
# read: the first frame of a connection must be a hello of at most MAX_HELLO_BYTES
# (anyone on the node may connect), every later one at most MAX_FRAME_BYTES, a quarter
# of the collector's default message limit (the relay makes one batch of each frame).
MAX_HELLO_BYTES = 64 << 10
MAX_FRAME_BYTES = 16 << 20
# Records per frame so that a frame with a full string list stays under the limit; the
# hook splits bigger tables (a full CUPTI buffer can hold more).
MAX_FRAME_RECORDS = (MAX_FRAME_BYTES // 2) // (8 * NUM_COLUMNS)
# samples dropped so far, string_base, length of the JSON string list, frame_base, frame
# count, node_base, node count, sample count; then the columns of FRAME_COLUMNS,
# NODE_COLUMNS and SAMPLE_COLUMNS, each an int64 array of its table's length
STACKS_HEADER = struct.Struct("<QIIIIIII")

_LITTLE = sys.byteorder == "little"


class StringTable:
    """Interns names per process; new names travel with the next records frame.

    Thread-safe: CUPTI's buffer callback and other threads may intern concurrently.
    """

    def __init__(self) -> None:
        self._ids: dict[str, int] = {"": 0}
        self._sent = 1  # strings[0:_sent] are already in an enqueued frame
        self._strings: list[str] = [""]
        self._lock = threading.Lock()

    def intern(self, name: str) -> int:
        found = self._ids.get(name)
        if found is not None:
            return found
        with self._lock:
            found = self._ids.get(name)
            if found is None:
                found = len(self._strings)
                self._strings.append(name)
                self._ids[name] = found
            return found

    def take_pending(self) -> tuple[int, list[str]]:
        with self._lock:
            base = self._sent
            pending = self._strings[base:]
            self._sent = len(self._strings)
            return base, pending

    def sent(self) -> list[str]:
        """Every name already handed to a frame (from id 1): what a fresh stream needs."""
        with self._lock:
            return self._strings[1 : self._sent]

    def restore_pending(self, base: int) -> None:
        """Undo ``take_pending`` when the frame carrying the strings was dropped."""
        with self._lock:
            self._sent = min(self._sent, base)


def _column_bytes(col: Any, length: int) -> bytes | memoryview:
    view = memoryview(col)
    if view.itemsize != 8 or view.format not in ("q", "<q", "l", "<l", "=q", "=l"):
        raise TypeError(f"record columns must be int64, got format {view.format!r}")
    if len(view) != length:
        raise ValueError("ragged record columns")
    if not _LITTLE:  # pragma: no cover - big-endian hosts
        swapped = array.array("q", view.tobytes())
        swapped.byteswap()
        return swapped.tobytes()
    return view.cast("B")


def encode_frame(kind: FrameType, payload: bytes | bytearray | memoryview) -> bytes:
    return HEADER.pack(kind, len(payload)) + bytes(payload)


def encode_json_frame(kind: FrameType, obj: Any) -> bytes:
    return encode_frame(kind, json.dumps(obj, separators=(",", ":")).encode())


def encode_capture_frame(
    capture_id: str, start_realtime_ns: int, duration_ns: int, steps: int = 0, skip_steps: int = 0
) -> bytes:
    window: dict[str, Any] = {
        "capture_id": capture_id,
        "start_realtime_ns": start_realtime_ns,
        "duration_ns": duration_ns,
    }
    if steps:
        window.update(steps=steps, skip_steps=skip_steps)
    return encode_json_frame(FrameType.CAPTURE, window)


def encode_records_frame(
    table: RecordTable, string_base: int, strings: list[str], dropped: int
) -> bytes:
    """One frame of the whole table (callers keep it under ``MAX_FRAME_RECORDS``)."""
    n = len(table)
    columns = [_column_bytes(col, n) for col in table.columns]
    return _records_frame(columns, 0, n, string_base, strings, dropped)


def encode_records_frames(
    table: RecordTable, string_base: int, strings: list[str], dropped: int
) -> list[tuple[bytes, int]]:
    """The table as frames of at most ``MAX_FRAME_RECORDS`` records each, with their
    record counts; the new names travel with the first (in frames of their own before
    it when they are too many for one). Slices of the columns' own memory: nothing is
    copied but into the frames themselves."""
    n = len(table)
    columns = [_column_bytes(col, n) for col in table.columns]
    out: list[tuple[bytes, int]] = []
    names: list[str] = []
    size = 0
    for name in strings:
        cost = len(name.encode()) * 6 + 3  # the most json.dumps can make of it
        if names and size + cost > MAX_FRAME_BYTES // 2:
            out.append((_records_frame(columns, 0, 0, string_base, names, dropped), 0))
            string_base += len(names)
            names, size = [], 0
        names.append(name)
        size += cost
    for start in range(0, max(n, 1), MAX_FRAME_RECORDS):
        stop = min(n, start + MAX_FRAME_RECORDS)
        frame = _records_frame(columns, start, stop, string_base, names, dropped)
        out.append((frame, stop - start))
        string_base += len(names)  # later frames name no new strings: the next free id
        names = []
    return out


def _records_frame(
    columns: list[Any], start: int, stop: int, string_base: int, strings: list[str], dropped: int
) -> bytes:
    n = stop - start
    blob = json.dumps(strings, separators=(",", ":")).encode() if strings else b""
    length = RECORDS_HEADER.size + len(blob) + 8 * NUM_COLUMNS * n
    parts: list[Any] = [
        HEADER.pack(FrameType.RECORDS, length),  # one join: the frame is copied once
        RECORDS_HEADER.pack(dropped, string_base, len(blob), n),
        blob,
    ]
    parts.extend(column[8 * start : 8 * stop] for column in columns)
    return b"".join(parts)


class DecodedRecords:
    """A records frame as received by the launcher; columns stay raw bytes."""

    __slots__ = ("column_data", "count", "dropped", "string_base", "strings")

    def __init__(
        self,
        dropped: int,
        string_base: int,
        strings: list[str],
        count: int,
        column_data: memoryview,
    ) -> None:
        self.dropped = dropped
        self.string_base = string_base
        self.strings = strings
        self.count = count
        self.column_data = column_data  # NUM_COLUMNS * count little-endian int64


def int64_values(column: memoryview) -> list[int]:
    """A column's little-endian int64 bytes (as in ``DecodedRecords.column_data``) as ints."""
    if _LITTLE:
        return column.cast("B").cast("q").tolist()
    swapped = array.array("q", column.tobytes())  # pragma: no cover - big-endian hosts
    swapped.byteswap()  # pragma: no cover
    return swapped.tolist()  # pragma: no cover


def decode_records(payload: bytes | memoryview) -> DecodedRecords:
    view = memoryview(payload)
    if len(view) < RECORDS_HEADER.size:
        raise ValueError("truncated records frame")
    dropped, base, blob_len, count = RECORDS_HEADER.unpack_from(view)
    offset = RECORDS_HEADER.size
    strings: list[str] = json.loads(bytes(view[offset : offset + blob_len])) if blob_len else []
    offset += blob_len
    expected = offset + 8 * NUM_COLUMNS * count
    if len(view) != expected:
        raise ValueError(f"records frame is {len(view)} bytes, expected {expected}")
    return DecodedRecords(dropped, base, strings, count, view[offset:])


def encode_stacks_frame(batch: StackBatch, string_base: int, strings: list[str]) -> bytes:
    blob = json.dumps(strings, separators=(",", ":")).encode() if strings else b""
    tables = ((batch.frames, batch.num_frames), (batch.nodes, batch.num_nodes),
              (batch.samples, len(batch)))  # fmt: skip
    width = sum(len(columns) * n for columns, n in tables)
    parts: list[bytes | memoryview] = [
        HEADER.pack(FrameType.STACKS, STACKS_HEADER.size + len(blob) + 8 * width),
        STACKS_HEADER.pack(
            batch.dropped, string_base, len(blob), batch.frame_base, batch.num_frames,
            batch.node_base, batch.num_nodes, len(batch),
        ),
        blob,
    ]  # fmt: skip
    for columns, n in tables:
        parts.extend(_column_bytes(col, n) for col in columns.values())
    return b"".join(parts)


class DecodedStacks:
    """A stacks frame as received by the launcher: its string list and its batch."""

    __slots__ = ("batch", "string_base", "strings")

    def __init__(self, string_base: int, strings: list[str], batch: StackBatch) -> None:
        self.string_base = string_base
        self.strings = strings
        self.batch = batch


def decode_stacks(payload: bytes | memoryview) -> DecodedStacks:
    view = memoryview(payload)
    if len(view) < STACKS_HEADER.size:
        raise ValueError("truncated stacks frame")
    dropped, base, blob_len, frame_base, frames, node_base, nodes, samples = (
        STACKS_HEADER.unpack_from(view)
    )
    offset = STACKS_HEADER.size
    strings: list[str] = json.loads(bytes(view[offset : offset + blob_len])) if blob_len else []
    offset += blob_len
    batch = StackBatch(frame_base, node_base, dropped)
    tables = ((batch.frames, FRAME_COLUMNS, frames), (batch.nodes, NODE_COLUMNS, nodes),
              (batch.samples, SAMPLE_COLUMNS, samples))  # fmt: skip
    expected = offset + 8 * sum(len(names) * n for _, names, n in tables)
    if len(view) != expected:
        raise ValueError(f"stacks frame is {len(view)} bytes, expected {expected}")
    for columns, names, n in tables:
        for name in names:
            columns[name] = array.array("q", int64_values(view[offset : offset + 8 * n]))
            offset += 8 * n
    return DecodedStacks(base, strings, batch)


def iter_frames(chunks: Iterable[bytes]) -> Iterable[tuple[FrameType, memoryview]]:
    """Reassemble frames from a byte stream (used by tests and simple readers)."""
    buf = bytearray()
    for chunk in chunks:
        buf += chunk
        while len(buf) >= HEADER.size:
            kind, length = HEADER.unpack_from(buf)
            if len(buf) < HEADER.size + length:
                break
            payload = bytes(buf[HEADER.size : HEADER.size + length])
            del buf[: HEADER.size + length]
            yield FrameType(kind), memoryview(payload)
