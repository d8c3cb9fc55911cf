"""Numbers and strings as fixed-width ASCII, a whole numpy column at a time.

The Chrome exporter writes each event as one row of a byte matrix (``chrome_rows``):
every row of a block has the same width, so a block is built with a few numpy
operations per field and written with one ``write``, no Python object per event. Widths
are made equal with JSON's insignificant whitespace: numbers are right-aligned after
spaces (``"ts":   12.500``), strings are followed by spaces (``"grid":"(1, 1, 1)"  ,``).
A reader parses exactly the values that a compact writer would have written.

Digits come from a table of four-digit groups: a column of n values costs a division,
a remainder and a table lookup per four digits, not a string per value.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

SPACE = 0x20
MINUS = 0x2D
_GROUP = 10_000
_BLANK_GROUP = 2 * _GROUP  # index of the all-space row of _GROUPS


def _group_table() -> np.ndarray:
    """Rows 0-9999: the group as the top of a number (``"  12"``); rows 10000-19999: the
    same group inside a number, zero-padded (``"0012"``); row 20000: four spaces."""
    padded = np.array([f"{i:04d}".encode() for i in range(_GROUP)], dtype="S4")
    top = np.array([f"{i:4d}".encode() for i in range(_GROUP)], dtype="S4")
    table = np.concatenate([top, padded, np.array([b"    "], dtype="S4")])
    return table.view(np.uint8).reshape(-1, 4)


_GROUPS = _group_table()
_GROUP_WORDS = _GROUPS.view(np.uint32).reshape(-1)  # a group's four characters as one word
_POINT_WORDS = np.array([f".{i:03d}".encode() for i in range(1000)], dtype="S4").view(np.uint32)
_POWERS = np.array([10**i for i in range(20)], dtype=np.uint64)


def digits(value: int) -> int:
    """How many decimal digits ``value`` (>= 0) has; 0 has one."""
    return len(str(value))


def magnitude(values: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """(|values|, the rows that are negative or None when none is).

    The magnitudes are int64 (fast division) unless one is 2**63 (int64's minimum, or a
    uint64 column): then uint64.
    """
    if values.dtype.kind == "u":
        if values.shape[0] and int(values.max()) >= 1 << 63:
            return values.astype(np.uint64, copy=False), None
        return values.astype(np.int64, copy=False), None
    values = values.astype(np.int64, copy=False)
    negative = values < 0
    if not negative.any():
        return values, None
    rows = np.flatnonzero(negative)
    if int(values.min()) == -(1 << 63):
        size = values.astype(np.uint64)
        size[rows] = ~size[rows] + np.uint64(1)  # two's complement: exact for the minimum
        return size, rows
    return np.abs(values), rows


def int_width(values: np.ndarray) -> int:
    """Characters the widest of these integers takes, sign included."""
    if values.shape[0] == 0:
        return 1
    size, negative = magnitude(values)
    return digits(int(size.max())) + (0 if negative is None else 1)


def _group_words(size: np.ndarray, words: np.ndarray) -> np.ndarray:
    """Fill ``words`` (rows x groups, uint32) with the four-character groups of each
    number, most significant first, right-aligned after spaces (``size`` non-negative,
    at most four digits a group)."""
    groups = words.shape[1]
    high = size
    group_size = size.dtype.type(_GROUP)
    for group in range(groups):
        column = groups - 1 - group
        if group == groups - 1:
            index = high.astype(np.intp, copy=False)
        else:
            above = high // group_size
            index = (high - above * group_size).astype(np.intp, copy=False)
            index += (above != 0) * _GROUP  # digits above this group: keep its leading zeros
        if group:
            index = np.where(high == 0, _BLANK_GROUP, index)  # nothing left: spaces
        words[:, column] = np.take(_GROUP_WORDS, index)
        if group < groups - 1:
            high = above
    return words


def _store_right(out: np.ndarray, text: np.ndarray) -> None:
    """Write the last ``out.shape[1]`` characters of each row of ``text`` into ``out``:
    one store for the whole field."""
    width = out.shape[1]
    out[:] = text.view(np.uint8).reshape(text.shape[0], -1)[:, -width:]


def write_uint(out: np.ndarray, size: np.ndarray) -> None:
    """Right-align the digits of ``size`` (non-negative) in ``out`` (rows x width, uint8)."""
    words = np.empty((size.shape[0], (out.shape[1] + 3) // 4), dtype=np.uint32)
    _store_right(out, _group_words(size, words))


def _write_signs(out: np.ndarray, size: np.ndarray, negative: np.ndarray | None) -> None:
    """Put a minus right before the first digit of each negative row."""
    if negative is None:
        return
    count = np.maximum(1, np.searchsorted(_POWERS, size[negative].astype(np.uint64), "right"))
    out[negative, out.shape[1] - 1 - count] = MINUS


def write_int(out: np.ndarray, values: np.ndarray) -> None:
    """Right-align the integers ``values`` in ``out``, a minus before negative ones."""
    size, negative = magnitude(values)
    write_uint(out, size)
    _write_signs(out, size, negative)


def millis_width(values: np.ndarray) -> int:
    """Characters ``write_millis`` needs for the widest of ``values``."""
    if values.shape[0] == 0:
        return 5
    size, negative = magnitude(values)
    return digits(int(size.max()) // 1000) + 4 + (0 if negative is None else 1)


def write_millis(out: np.ndarray, values: np.ndarray) -> None:
    """``values / 1000`` written exactly with three decimals (ns as µs: ``1234.567``).

    The decimal is the exact quotient, so a parser reads the double nearest to it: the
    same double as ``values / 1000.0``.
    """
    size, negative = magnitude(values)
    width = out.shape[1]
    thousand = size.dtype.type(1000)
    units = size // thousand
    groups = (width - 4 + 3) // 4
    text = np.empty((size.shape[0], groups + 1), dtype=np.uint32)
    _group_words(units, text[:, :groups])
    text[:, groups] = np.take(_POINT_WORDS, (size - units * thousand).astype(np.intp))
    _store_right(out, text)
    _write_signs(out[:, : width - 4], units, negative)


def text_table(fragments: Sequence[bytes]) -> np.ndarray:
    """The fragments as rows of one uint8 matrix, each followed by spaces to the widest."""
    width = max((len(f) for f in fragments), default=0)
    table = np.full((len(fragments), width), SPACE, dtype=np.uint8)
    for row, fragment in zip(table, fragments, strict=True):
        row[: len(fragment)] = np.frombuffer(fragment, dtype=np.uint8)
    return table


__all__ = [
    "SPACE",
    "digits",
    "int_width",
    "magnitude",
    "millis_width",
    "text_table",
    "write_int",
    "write_millis",
    "write_uint",
]
