"""A chunk's debug annotations and categories: each slice's args, encoded over its rows.

The args every kind in the chunk shares are one field over every row; the others a
``choice`` per kind over that kind's rows, before and after the shared ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tfprof.collector.export.args import Selection, arg_column, has_rate, pick, rate_thousandths
from tfprof.collector.export.perfetto_interning import Interned
from tfprof.collector.export.protowire import (
    FIXED64,
    LEN,
    VARINT,
    Piece,
    choice,
    fixed64,
    message,
    optional,
    tag,
    varint,
    varints,
)
from tfprof.collector.timeline.model import SliceTrack
from tfprof.core.cupti_labels import PEER_COPY
from tfprof.core.records import RecordKind
from tfprof.core.slice_args import SLICE_CATEGORIES, ArgType, SliceArg, args_of, category_of

# TrackEvent.debug_annotations
_ANNOTATION = tag(4, LEN)
# DebugAnnotation fields
_ANNOTATION_NAME_IID = tag(1, VARINT)
_INT_VALUE = tag(4, VARINT)
_DOUBLE_VALUE = tag(5, FIXED64)
_STRING_VALUE_IID = tag(17, VARINT)


def split_args(
    kinds: Sequence[int | None],
) -> tuple[list[SliceArg], dict[int | None, tuple[list[SliceArg], list[SliceArg]]]]:
    """(the args every kind has, one run in the same order in each: the table's COMMON
    ones; each kind's args before and after that run)."""
    lists = [args_of(kind) for kind in kinds]
    shared = [a for a in lists[0] if all(any(a is b for b in args) for args in lists)]
    own: dict[int | None, tuple[list[SliceArg], list[SliceArg]]] = {}
    for kind, args in zip(kinds, lists, strict=True):
        at = next((i for i, a in enumerate(args) if shared and a is shared[0]), len(args))
        run = args[at : at + len(shared)]
        if len(run) != len(shared) or any(a is not b for a, b in zip(run, shared, strict=True)):
            return [], {k: (list(args_of(k)), []) for k in kinds}  # no common run: none shared
        own[kind] = (list(args[:at]), list(args[at + len(shared) :]))
    return shared, own


@dataclass(frozen=True)
class _Values:
    """One arg on the rows of one kind: its DebugAnnotation value field and encoding,
    the values (one per row; or, for a varint every row has, that one value), and which
    of the rows have one (None: all of them)."""

    tag: bytes
    varint: bool  # else fixed64 (a double)
    values: np.ndarray
    present: np.ndarray | None = None


def _int(values: np.ndarray, present: np.ndarray | None = None) -> _Values:
    return _Values(_INT_VALUE, True, values, present)


def _strings(iids: np.ndarray) -> _Values:
    return _Values(_STRING_VALUE_IID, True, iids)


def _doubles(values: np.ndarray, present: np.ndarray | None = None) -> _Values:
    return _Values(_DOUBLE_VALUE, False, values.astype(np.float64), present)


def _value(
    arg: SliceArg, picked: Selection, duration_ns: np.ndarray, interned: Interned
) -> _Values:
    if arg.type is ArgType.INT:
        known = picked.track.known_value(arg.columns[0])
        if known is not None:  # one value on every row: a literal, no column read
            return _int(np.array([known], dtype=np.int64))
        return _int(picked.column(arg.columns[0]))
    columns = [picked.column(c) for c in arg.columns]
    if arg.type is ArgType.LABEL:
        assert arg.labels is not None
        return _strings(interned.label_iids(arg.labels, columns[0]))
    if arg.type is ArgType.DIM3:
        return _strings(interned.dim_iids(*columns))
    if arg.type is ArgType.RATE:
        rate = rate_thousandths(columns[0], duration_ns) / 1000
        return _doubles(rate, has_rate(duration_ns))
    if arg.type is ArgType.PEER_DEVICE:
        return _int(picked.column("dst_device"), picked.column("copy_kind") == PEER_COPY)
    if arg.type is ArgType.NONZERO:
        return _int(columns[0], columns[0] != 0)
    return _generic(arg, picked, duration_ns, interned)


def _generic(
    arg: SliceArg, picked: Selection, duration_ns: np.ndarray, interned: Interned
) -> _Values:
    """An arg type without a column path: its values one by one (ints, floats, text)."""
    column = arg_column(picked.track, arg, picked.sel, duration_ns)
    values: list[object] = [None] * picked.count
    if column.where is None:
        values = list(column.values)
    else:
        for i, value in zip(column.where.tolist(), column.values, strict=True):
            values[i] = value
    present = np.array([v is not None for v in values], dtype=bool)
    found = [v for v in values if v is not None]
    if all(isinstance(v, int) for v in found):
        return _int(np.array([v or 0 for v in values], dtype=np.int64), present)
    if all(isinstance(v, (int, float)) for v in found):
        return _doubles(np.array([v or 0.0 for v in values], dtype=np.float64), present)
    texts = ["" if v is None else str(v) for v in values]
    iids = interned.string_iids(texts, np.arange(len(texts)))
    return _Values(_STRING_VALUE_IID, True, iids, present)


def _annotation(name_iid: int, value: _Values) -> list[Piece]:
    """One DebugAnnotation over the rows of ``value`` (none on rows that lack one)."""
    field = value.values
    low = int(field.min()) if value.varint and field.shape[0] else 0
    high = int(field.max()) if value.varint and field.shape[0] else 1
    encoded: Piece = (
        varint(low) if low == high else varints(field) if value.varint else fixed64(field)
    )
    name = _ANNOTATION_NAME_IID + varint(name_iid)
    annotation = message(_ANNOTATION, [name, value.tag, encoded])
    return annotation if value.present is None else optional(annotation, value.present)


def _own_annotations(
    args: Sequence[SliceArg], picked: Selection, duration_ns: np.ndarray, interned: Interned
) -> list[Piece]:
    """The annotations of args only one kind has, over that kind's rows."""
    out: list[Piece] = []
    for arg in args:
        value = _value(arg, picked, duration_ns, interned)
        out += _annotation(interned.annotation_names[arg.name], value)
    return out


def chunk_annotations(
    track: SliceTrack,
    sel: np.ndarray | slice,
    kinds: np.ndarray,
    interned: Interned,
) -> tuple[list[Piece], np.ndarray]:
    """Every arg of the chunk's slices, and each row's category iid.

    The args all kinds share are one field over every row; the others are a ``choice``
    per kind, made over that kind's rows only, before and after the shared ones.
    """
    rows = kinds.shape[0]
    present_kinds, kind_rows = _kind_rows(kinds)
    shared, own = split_args(present_kinds)
    category = np.zeros(rows, dtype=np.int64)
    before: list[tuple[np.ndarray, list[Piece]]] = []
    after: list[tuple[np.ndarray, list[Piece]]] = []
    for kind, index in zip(present_kinds, kind_rows, strict=True):
        rows_of_kind = _subset(sel, index, rows)
        category[index] = _category_iids(track, kind, rows_of_kind, interned)
        picked = Selection(track, rows_of_kind)
        duration = pick(track.duration_ns, rows_of_kind)
        first, last = own[kind]
        before.append((index, _own_annotations(first, picked, duration, interned)))
        after.append((index, _own_annotations(last, picked, duration, interned)))
    annotations = choice(before, rows)
    # A shared arg is one table entry, so one value whatever the kind: read for all rows.
    every = Selection(track, sel)
    annotations += _own_annotations(shared, every, pick(track.duration_ns, sel), interned)
    annotations += choice(after, rows)
    return annotations, category


_KNOWN_KINDS = np.zeros(max(SLICE_CATEGORIES) + 1, dtype=bool)
_KNOWN_KINDS[list(SLICE_CATEGORIES)] = True


def _kind_rows(kinds: np.ndarray) -> tuple[list[int | None], list[np.ndarray]]:
    """The kinds present, in ascending order (None last: kinds this version does not
    know, shown with the generic args), and the rows of each. A count per kind value
    finds them: one pass, no sort of the chunk."""
    top = _KNOWN_KINDS.shape[0]
    low, high = (int(kinds.min()), int(kinds.max())) if kinds.shape[0] else (0, 0)
    if low == high and low < top and _KNOWN_KINDS[low]:
        return [low], [np.arange(kinds.shape[0])]  # a track of one kind: most chunks
    inside = (kinds >= 0) & (kinds < top)
    counts = np.bincount(np.where(inside, kinds, 0), minlength=top)
    known = inside & _KNOWN_KINDS[np.where(inside, kinds, 0)]
    present: list[int | None] = [k for k in np.flatnonzero(counts).tolist() if _KNOWN_KINDS[k]]
    index = [np.flatnonzero(kinds == k) for k in present]
    if not known.all():
        present.append(None)
        index.append(np.flatnonzero(~known))
    return present, index


def _subset(sel: np.ndarray | slice, index: np.ndarray, rows: int) -> np.ndarray | slice:
    """The rows ``index`` of the selection ``sel`` (of ``rows`` rows)."""
    if index.shape[0] == rows:
        return sel  # every row
    if isinstance(sel, slice):
        at: np.ndarray = index + sel.start
        return at
    return np.take(sel, index)


def _category_iids(
    track: SliceTrack, kind: int | None, sel: np.ndarray | slice, interned: Interned
) -> np.ndarray | int:
    """The category iid of slices ``sel`` (of one kind): the kind's, or a MARKER's own."""
    fallback = interned.categories[category_of(kind)]
    if kind != RecordKind.MARKER or track.category_id is None:
        return fallback
    found, index = np.unique(pick(track.category_id, sel), return_inverse=True)
    names = interned.names
    iids = [interned.category_iid(names[i]) if i >= 0 else fallback for i in found.tolist()]
    result: np.ndarray = np.take(np.array(iids, dtype=np.int64), index.reshape(-1))
    return result
