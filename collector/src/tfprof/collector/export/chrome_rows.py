"""Chrome ``"X"`` events as rows of one byte matrix, built from whole columns: the hot loop.

Every event of a block shares one layout: the literal JSON of the event (keys, the
category, the pid, arg names, and any arg whose value is the same on every row) with
fixed-width slots for what differs per row. Slots are filled a column at a time
(``text_columns``): right-aligned numbers after spaces, strings followed by spaces, so
the rows are equally wide and the block is written as it lies in memory. Which args an
event carries, in which order, comes from ``tfprof.core.slice_args``.

A block holds the slices of one kind whose names take about as many bytes (``NameText``
groups names into width classes), so padding after a name stays under
``NAME_WIDTH_STEP`` bytes. Every row starts with a comma: the reporter writes the
blocks after the document's first event.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np
import orjson

from tfprof.collector.export.args import (
    Dim3Codes,
    Selection,
    arg_column,
    has_rate,
    is_sparse,
    pick,
    rate_thousandths,
)
from tfprof.collector.export.text_columns import (
    int_width,
    millis_width,
    text_table,
    write_int,
    write_millis,
)
from tfprof.collector.timeline.model import SliceTrack
from tfprof.core.cupti_labels import Labels
from tfprof.core.records import RecordKind
from tfprof.core.slice_args import ArgType, SliceArg, args_of, category_of

NAME_WIDTH_STEP = 16  # names in one block differ in length by less than this

# Fills a slot: out is (rows, width) of the block's matrix.
_Fill = Callable[[np.ndarray], None]


@dataclass(frozen=True)
class Slot:
    """Bytes that differ per row: ``width`` columns that ``fill`` writes."""

    width: int
    fill: _Fill


Piece = bytes | Slot


class NameText:
    """The timeline's names as JSON strings, grouped by width for blocks of equal rows."""

    def __init__(self, names: Sequence[str]) -> None:
        encoded = [orjson.dumps(name) for name in names]
        self.encoded = encoded
        lengths = np.array([len(e) for e in encoded], dtype=np.int64)
        self.width_class = (lengths + NAME_WIDTH_STEP - 1) // NAME_WIDTH_STEP
        self._encoded = encoded
        self._tables: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def table(self, width_class: int) -> tuple[np.ndarray, np.ndarray]:
        """(text of each name of the class as matrix rows, each name id's row in it)."""
        found = self._tables.get(width_class)
        if found is None:
            ids = np.flatnonzero(self.width_class == width_class)
            row_of = np.zeros(self.width_class.shape[0], dtype=np.intp)
            row_of[ids] = np.arange(ids.shape[0])
            found = (text_table([self._encoded[i] for i in ids.tolist()]), row_of)
            self._tables[width_class] = found
        return found


class Rows:
    """A block of ``count`` events laid out by ``pieces``, made when ``finish`` is called
    (by the reporter's pipeline, on another thread), or bytes ``made`` already (1-D).
    Its size is known before it is made."""

    def __init__(self, pieces: Sequence[Piece], count: int, made: np.ndarray | None = None) -> None:
        self.pieces = pieces
        self.count = count
        self.made = made
        width = sum(p.width if isinstance(p, Slot) else len(p) for p in pieces)
        self.nbytes = count * width if made is None else int(made.nbytes)

    def finish(self) -> memoryview:
        """The block's bytes, every event led by a comma, as they lie in memory."""
        rows = self.made if self.made is not None else render_rows(self.pieces, self.count)
        return rows.reshape(-1).data


def render_rows(pieces: Sequence[Piece], count: int) -> np.ndarray:
    """A (count, width) matrix: the literal pieces on every row, each slot filled."""
    template = bytearray()
    slots: list[tuple[int, Slot]] = []
    for piece in pieces:
        if isinstance(piece, Slot):
            slots.append((len(template), piece))
            template += b" " * piece.width
        else:
            template += piece
    rows = np.empty((count, len(template)), dtype=np.uint8)
    rows[:] = np.frombuffer(bytes(template), dtype=np.uint8)
    for start, slot in slots:
        slot.fill(rows[:, start : start + slot.width])
    return rows


def _json(value: object) -> bytes:
    return orjson.dumps(value)


def int_piece(values: np.ndarray) -> Piece:
    """Integers: a literal when every row has the same value, else a right-aligned slot."""
    if values.shape[0] and values.min() == values.max():
        return _json(int(values[0]))

    def fill(out: np.ndarray) -> None:
        write_int(out, values)

    return Slot(int_width(values), fill)


def millis_piece(values_ns: np.ndarray) -> Slot:
    """Nanoseconds as microseconds with three decimals (``ts``, ``dur``)."""

    def fill(out: np.ndarray) -> None:
        write_millis(out, values_ns)

    return Slot(millis_width(values_ns), fill)


def table_piece(table: np.ndarray, index: np.ndarray) -> Piece:
    """Row ``index[i]`` of a text table on row i (a literal when every row has one)."""
    if index.shape[0] and index.min() == index.max():
        return bytes(table[index[0]]).rstrip(b" ")

    def fill(out: np.ndarray) -> None:
        # A row take: faster than table[index] (bench/results/cpu-design-choices.txt).
        out[:] = np.take(table, index, axis=0)

    return Slot(table.shape[1], fill)


class DimText:
    """Launch dimensions as JSON texts, a table that grows with the triples met."""

    def __init__(self) -> None:
        self._codes = Dim3Codes()
        self._table = text_table([])

    def piece(self, x: np.ndarray, y: np.ndarray, z: np.ndarray) -> Piece:
        codes = self._codes.codes(x, y, z)
        texts = self._codes.texts
        if self._table.shape[0] != len(texts):
            self._table = text_table([_json(t) for t in texts])
        return table_piece(self._table, codes)


# Each enum's labels as JSON texts: values CUPTI may add later land on the fallback row.
_LABEL_TABLES: dict[int, np.ndarray] = {}


def _label_piece(labels: Labels, values: np.ndarray) -> Piece:
    table = _LABEL_TABLES.get(id(labels))
    if table is None:
        top = labels.max_value
        texts = [_json(labels.label(v)) for v in range(top + 1)] + [_json(labels.fallback)]
        table = _LABEL_TABLES[id(labels)] = text_table(texts)
    last = table.shape[0] - 1
    index = np.where((values >= 0) & (values < last), values, last)
    return table_piece(table, index)


def _rate_piece(nbytes: np.ndarray, duration_ns: np.ndarray) -> Piece:
    thousandths = rate_thousandths(nbytes, duration_ns)
    missing = np.flatnonzero(~has_rate(duration_ns))
    width = max(millis_width(thousandths), 4)
    null = np.frombuffer(b"null".rjust(width), dtype=np.uint8)

    def fill(out: np.ndarray) -> None:
        write_millis(out, thousandths)
        out[missing] = null  # no duration, no rate: null, as a NaN is written

    return Slot(width, fill)


def _distinct_piece(values: list[object]) -> Piece:
    """Any JSON values (an arg type this module has no column path for): each distinct
    value rendered once."""
    index_of: dict[bytes, int] = {}
    index = np.array([index_of.setdefault(_json(v), len(index_of)) for v in values], np.intp)
    return table_piece(text_table(list(index_of)), index)


def arg_piece(picked: Selection, arg: SliceArg, duration_ns: np.ndarray, dims: DimText) -> Piece:
    """The value of a dense arg on each of the slices ``picked``."""
    columns = [picked.column(c) for c in arg.columns]
    if arg.type is ArgType.INT:
        return int_piece(columns[0])
    if arg.type is ArgType.LABEL:
        assert arg.labels is not None  # the table gives every LABEL arg its labels
        return _label_piece(arg.labels, columns[0])
    if arg.type is ArgType.DIM3:
        return dims.piece(*columns)
    if arg.type is ArgType.RATE:
        return _rate_piece(columns[0], duration_ns)
    return _distinct_piece(arg_column(picked.track, arg, picked.sel, duration_ns).values)


def sparse_piece(picked: Selection, arg: SliceArg, separator: bytes = b",") -> Piece:
    """``,"name":value`` on the slices that have the arg, spaces on the others
    (``separator``: b"" when it is the event's only arg)."""
    key = separator + _json(arg.name) + b":"
    if arg.type is ArgType.NONZERO:
        return _nonzero_piece(key, picked.column(arg.columns[0]))
    column = arg_column(picked.track, arg, picked.sel, np.zeros(0, dtype=np.int64))
    assert column.where is not None
    if column.where.shape[0] == 0:
        return b""
    texts = text_table([key + _json(v) for v in column.values])

    def fill(out: np.ndarray) -> None:
        out[column.where] = texts  # few rows: the peer copies

    return Slot(texts.shape[1], fill)


def _nonzero_piece(key: bytes, values: np.ndarray) -> Piece:
    """``key`` and the number on the rows whose value is not 0 (most of them, for an
    external id), spaces on the others: a column at a time, like a dense int."""
    where = np.flatnonzero(values)
    if where.shape[0] == 0:
        return b""
    present = np.take(values, where)
    width = len(key) + int_width(present)

    def fill(out: np.ndarray) -> None:
        texts = np.empty((where.shape[0], width), dtype=np.uint8)
        texts[:, : len(key)] = np.frombuffer(key, dtype=np.uint8)
        write_int(texts[:, len(key) :], present)
        out[where] = texts

    return Slot(width, fill)


@cache
def _args(kind: int | None) -> tuple[SliceArg, ...]:
    """The args of ``kind``; a sparse one holds its own leading comma, so it must follow
    the dense ones (or be the only arg)."""
    args = args_of(kind)
    dense = [not is_sparse(a) for a in args]
    first_sparse = dense.index(False) if False in dense else len(args)
    if (first_sparse == 0 and len(args) > 1) or any(dense[first_sparse:]):
        raise ValueError(f"slice_args: sparse args must come last: {[a.name for a in args]}")
    return args


def category_piece(
    track: SliceTrack, kind: int | None, sel: np.ndarray | slice, names: NameText
) -> Piece:
    """The slices' category: their kind's, or a MARKER's own (its ``category_id``)."""
    fallback = _json(category_of(kind))
    if kind != RecordKind.MARKER or track.category_id is None:
        return fallback
    ids = pick(track.category_id, sel)
    found, index = np.unique(ids, return_inverse=True)
    texts = [names.encoded[i] if i >= 0 else fallback for i in found.tolist()]
    return table_piece(text_table(texts), index.reshape(-1))


def event_pieces(
    track: SliceTrack,
    kind: int | None,
    sel: np.ndarray | slice,
    names: NameText,
    name_class: int,
    tids: np.ndarray,
    dims: DimText,
) -> list[Piece]:
    """The layout of the events of slices ``sel`` of ``track`` (all of kind ``kind``).

    ``names``: the timeline's names, ``name_class`` the width class of the slices' names;
    ``tids``: each selected slice's thread; ``dims``: the launch dimensions met so far.
    """
    name_table, name_row = names.table(name_class)
    picked = Selection(track, sel)
    duration = pick(track.duration_ns, sel)
    pieces: list[Piece] = [
        b',{"ph":"X","cat":',
        category_piece(track, kind, sel, names),
        b',"name":',
        table_piece(name_table, np.take(name_row, pick(track.name_id, sel))),
        b',"pid":' + _json(track.pid) + b',"tid":',
        int_piece(tids),
        b',"ts":',
        millis_piece(pick(track.start_ns, sel)),
        b',"dur":',
        millis_piece(duration),
        b',"args":{',
    ]
    separator = b""
    for arg in _args(kind):
        if is_sparse(arg):
            pieces.append(sparse_piece(picked, arg, b"," if separator else b""))
            continue
        pieces += [separator + _json(arg.name) + b":", arg_piece(picked, arg, duration, dims)]
        separator = b","
    pieces.append(b"}}")
    return pieces


def slice_rows(
    track: SliceTrack,
    kind: int | None,
    sel: np.ndarray | slice,
    names: NameText,
    name_class: int,
    tids: np.ndarray,
    dims: DimText,
) -> Rows:
    """The events of the slices ``sel`` of ``track``, one ``,{...}`` per matrix row."""
    count = int(pick(track.start_ns, sel).shape[0])
    return Rows(event_pieces(track, kind, sel, names, name_class, tids, dims), count)


FLOW_NAME = b',"cat":"launch","name":"launch"}'  # both ends: Perfetto pairs them by id, cat, name


def flow_rows(
    phase: bytes, ids: np.ndarray, pid: np.ndarray, tid: np.ndarray, start_ns: np.ndarray
) -> Rows:
    """Flow events (``phase`` b"s" or b"f"), one ``,{...}`` per row: a start binds to the
    slice open on its thread at ``ts``, an end (``"bp":"e"``) to the slice enclosing it."""
    head = b',{"ph":"s"' if phase == b"s" else b',{"ph":"f","bp":"e"'
    pieces: list[Piece] = [
        head + b',"id":',
        int_piece(ids),
        b',"pid":',
        int_piece(pid),
        b',"tid":',
        int_piece(tid),
        b',"ts":',
        millis_piece(start_ns),
        FLOW_NAME,
    ]
    return Rows(pieces, int(ids.shape[0]))


__all__ = [
    "NAME_WIDTH_STEP",
    "DimText",
    "NameText",
    "Piece",
    "Rows",
    "Slot",
    "flow_rows",
    "render_rows",
    "slice_rows",
]
