"""Protobuf messages of many rows at once: the wire format built from numpy columns.

A row is a sequence of pieces: literal bytes (tags, and fields whose value is the same
on every row) and ``Field``s, whose bytes differ per row. Every field is laid out at its
widest in a byte matrix, and says how many of its bytes each row keeps: an absent field
keeps none. A column of varints is written at its widest value's width on every row: a
shorter value carries groups of zero after its own, with the continuation bit set, as
protobuf's wire format allows (every parser reads a varint of up to ten bytes; protobuf's
own serialiser writes the shortest). The rows of a chunk of one kind are then all as
wide: ``encode_rows`` fills the matrix a field at a time and its bytes are the rows',
one after the other, with nothing to drop. Only rows that differ in shape (an optional
field some have, alternatives per kind) drop what they do not keep.

Lengths of nested messages are fields too (``message``): the sum of what their pieces
keep on each row, so each row's message carries exactly its own size.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

VARINT, FIXED64, LEN = 0, 1, 2  # wire types
_PREFIX = np.arange(16)[None, :] < np.arange(17)[:, None]  # row k: the first k are True


def tag(field_number: int, wire_type: int) -> bytes:
    return varint(field_number << 3 | wire_type)


def varint(value: int) -> bytes:
    """One canonical varint (a negative int64 as its 64-bit two's complement)."""
    value &= (1 << 64) - 1
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _two_byte_table() -> np.ndarray:
    values = np.arange(1 << 14, dtype=np.int64)
    return np.stack([(values & 0x7F) | 0x80, values >> 7], axis=1).astype(np.uint8)


_TWO_BYTES = _two_byte_table()  # 0 .. 2**14 - 1 as two-byte varints


@dataclass(frozen=True)
class Field:
    """Bytes that differ per row: ``data`` (rows x width), of which row i keeps the
    first ``length[i]`` (``length`` an int: every row keeps that many)."""

    data: np.ndarray
    length: np.ndarray | int

    @property
    def width(self) -> int:
        return int(self.data.shape[1])


@dataclass(frozen=True)
class Group:
    """Pieces kept together, with the bytes each row keeps of them (``size``, summed
    once): a nested message, or what only the rows ``present`` have (None: all rows)."""

    pieces: tuple[Piece, ...]
    size: np.ndarray | int
    present: np.ndarray | None = None


@dataclass(frozen=True)
class Choice:
    """Rows that differ in shape (slices of different kinds): alternative k's pieces,
    made for its rows only, go to the rows ``index[k]``. The alternatives share one
    stretch of the matrix, as wide as the widest; each row keeps its own."""

    alternatives: tuple[tuple[np.ndarray, tuple[Piece, ...]], ...]  # (row index, pieces)
    rows: int

    @property
    def size(self) -> np.ndarray:
        """Bytes each row keeps."""
        size = np.zeros(self.rows, dtype=np.int64)
        for index, pieces in self.alternatives:
            size[index] = _total(pieces)
        return size


Piece = bytes | Field | Group | Choice


def varints(values: np.ndarray) -> Piece:
    """The varint of each value, every row as wide as the widest (int64 < 0 take ten
    bytes): a literal when every row has the same value."""
    rows = values.shape[0]
    if rows == 0:
        return b""
    low, high = int(values.min()), int(values.max())
    if low == high:
        return varint(low)
    if low >= 0 and high < 0x80:
        return Field(values.astype(np.uint8).reshape(rows, 1), 1)
    if low >= 0 and high < 1 << 14:
        return Field(np.take(_TWO_BYTES, values, axis=0), 2)
    unsigned = values.astype(np.uint64, copy=False)
    width = len(varint(high if low >= 0 else low))
    data = np.empty((rows, width), dtype=np.uint8)
    for k in range(width):
        group = (unsigned >> np.uint64(7 * k)).astype(np.uint8) & np.uint8(0x7F)
        data[:, k] = group | np.uint8(0x80 if k < width - 1 else 0)
    return Field(data, width)


def fixed64(values: np.ndarray) -> Field:
    """Eight little-endian bytes per value (a double, a fixed64)."""
    raw = np.ascontiguousarray(values, dtype=values.dtype.newbyteorder("<"))
    return Field(raw.view(np.uint8).reshape(-1, 8), 8)


def kept(piece: Piece) -> np.ndarray | int:
    """Bytes each row keeps of a piece."""
    if isinstance(piece, bytes):
        return len(piece)
    if isinstance(piece, Field):
        return piece.length
    return piece.size


def choice(alternatives: Sequence[tuple[np.ndarray, Sequence[Piece]]], rows: int) -> list[Piece]:
    """One alternative's pieces on each row (see ``Choice``); nothing when none has any."""
    kept_ones = tuple((index, tuple(p)) for index, p in alternatives if p)
    if not kept_ones:
        return []
    if len(alternatives) == 1 and alternatives[0][0].shape[0] == rows:
        return list(alternatives[0][1])  # every row is of the one kind
    picked = Choice(tuple((index, tuple(p)) for index, p in alternatives), rows)
    return [Group((picked,), picked.size)]


def _total(pieces: Sequence[Piece]) -> np.ndarray | int:
    size: np.ndarray | int = 0
    for piece in pieces:
        size = size + kept(piece)
    return size


def optional(pieces: Sequence[Piece], present: np.ndarray) -> list[Piece]:
    """The pieces on the rows ``present``; nothing of them on the others."""
    if present.all():
        return list(pieces)
    if not present.any():
        return []
    return [Group(tuple(pieces), np.where(present, _total(pieces), 0), present)]


def message(field_tag: bytes, pieces: Sequence[Piece]) -> list[Piece]:
    """A nested message: its tag and, per row, the size of what its pieces keep."""
    size = _total(pieces)
    if isinstance(size, int):
        head = field_tag + varint(size)
        return [Group((head, *pieces), len(head) + size)]
    length = varints(size)
    return [Group((field_tag, length, *pieces), len(field_tag) + kept(length) + size)]


class _Layout:
    """Where each piece of a row goes in the matrix, and what the rows keep of it."""

    def __init__(self) -> None:
        self.template = bytearray()
        self.fields: list[tuple[int, Field]] = []
        self.groups: list[tuple[int, int, np.ndarray]] = []  # (start, end, present)
        self.choices: list[tuple[int, int, list[tuple[np.ndarray, _Layout]]]] = []

    def add(self, pieces: Sequence[Piece]) -> None:
        for piece in pieces:
            if isinstance(piece, bytes):
                self.template += piece
            elif isinstance(piece, Field):
                self.fields.append((len(self.template), piece))
                self.template += bytes(piece.width)
            elif isinstance(piece, Choice):
                self._add_choice(piece)
            elif piece.present is None:
                self.add(piece.pieces)
            else:
                start = len(self.template)
                self.add(piece.pieces)
                last = self.groups[-1] if self.groups else None
                if last is not None and last[1] == start and last[2] is piece.present:
                    start = self.groups.pop()[0]  # next to a group of the same rows: one
                self.groups.append((start, len(self.template), piece.present))

    def _add_choice(self, picked: Choice) -> None:
        layouts = []
        for index, pieces in picked.alternatives:
            layout = _Layout()
            layout.add(pieces)
            layouts.append((index, layout))
        width = max(len(layout.template) for _, layout in layouts)
        self.choices.append((len(self.template), width, layouts))
        self.template += bytes(width)

    def fill(self, rows: int) -> tuple[np.ndarray, np.ndarray | None]:
        """(the rows' matrix, which bytes they keep or None for all)."""
        width = len(self.template)
        matrix = np.empty((rows, width), dtype=np.uint8)
        matrix[:] = np.frombuffer(bytes(self.template), dtype=np.uint8)
        # What every row keeps (a field's tail no row reaches, a choice's stretch until
        # its rows fill it in), set once for all rows; then what differs per row.
        same = np.ones(width, dtype=bool)
        varying: list[tuple[int, int, np.ndarray]] = []  # (start, width, lengths)
        for start, field in self.fields:
            matrix[:, start : start + field.width] = field.data
            if isinstance(field.length, int):
                same[start + field.length : start + field.width] = False
            else:
                varying.append((start, field.width, field.length))
        for start, stretch, _ in self.choices:
            same[start : start + stretch] = False  # rows of no alternative keep none
        if same.all() and not varying and not self.groups:
            return matrix, None
        keep = np.empty((rows, width), dtype=bool)
        keep[:] = same
        for start, field_width, lengths in varying:
            slot = slice(start, start + field_width)
            if field_width < _PREFIX.shape[1]:
                keep[:, slot] = np.take(_PREFIX[:, :field_width], lengths, axis=0)
            else:
                keep[:, slot] = np.arange(field_width)[None, :] < lengths[:, None]
        for start, end, present in self.groups:
            keep[:, start:end] &= present[:, None]
        for start, _, layouts in self.choices:
            for index, layout in layouts:
                own = len(layout.template)
                if own == 0:
                    continue
                block, block_keep = layout.fill(index.shape[0])
                matrix[index, start : start + own] = block
                keep[index, start : start + own] = True if block_keep is None else block_keep
        return matrix, keep


def encode_rows(pieces: Sequence[Piece], rows: int) -> bytes:
    """The rows' bytes, one row after the other, each piece as much as the row keeps."""
    return bytes(encoded_rows(pieces, rows))


def encoded_rows(pieces: Sequence[Piece], rows: int) -> memoryview:
    """``encode_rows``' bytes where they were made (no copy into a ``bytes``)."""
    layout = _Layout()
    layout.add(pieces)
    matrix, keep = layout.fill(rows)
    if keep is None:
        return matrix.reshape(-1).data
    # A flat mask whose dropped bytes come in runs (varint tails, an absent kind's
    # stretch): numpy copies the kept runs whole, faster than np.compress
    # (bench/results/cpu-design-choices.txt, "mask").
    kept_bytes: np.ndarray = matrix.reshape(-1)[keep.reshape(-1)]
    return kept_bytes.data


__all__ = [
    "FIXED64",
    "LEN",
    "VARINT",
    "Choice",
    "Field",
    "Group",
    "Piece",
    "choice",
    "encode_rows",
    "encoded_rows",
    "fixed64",
    "kept",
    "message",
    "optional",
    "tag",
    "varint",
    "varints",
]
