"""Perfetto slice packets of one track, built from whole columns: the export's hot loop.

Each slice is two ``TracePacket``s on the trace's one sequence, a ``TYPE_SLICE_BEGIN``
track event (name, category and debug annotations by interned id, values of string
args by interned id) and a ``TYPE_SLICE_END``, both with absolute timestamps. A chunk
of slices is encoded as rows of one byte matrix (``protowire``), one row per slice, so
no protobuf object is made per slice. Slices go out in time order whatever their kind
(an end and a begin at the same instant on a lane must stay in that order, or a
timestamp sort would nest them), so a row has a slot for every arg of every kind in
the chunk and keeps only its own kind's, in the table's order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from tfprof.collector.export.args import (
    Selection,
    arg_column,
    dim3_distinct,
    has_rate,
    rate_thousandths,
)
from tfprof.collector.export.protowire import (
    FIXED64,
    LEN,
    VARINT,
    Piece,
    encode_rows,
    fixed64,
    message,
    optional,
    tag,
    varint,
    varints,
)
from tfprof.collector.timeline import SliceTrack
from tfprof.core.cupti_labels import PEER_COPY
from tfprof.core.slice_args import CATEGORIES, ArgType, SliceArg, args_of, category_of

SEQUENCE_ID = 1  # every packet is on one sequence: interned ids are shared by all
_NEEDS_STATE = 2  # TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
_SLICE_BEGIN, _SLICE_END = 1, 2  # TrackEvent.Type

# TracePacket fields
_PACKET = tag(1, LEN)  # Trace.packet
_TIMESTAMP = tag(8, VARINT)
_SEQUENCE = tag(10, VARINT) + varint(SEQUENCE_ID) + tag(13, VARINT) + varint(_NEEDS_STATE)
_TRACK_EVENT = tag(11, LEN)
# TrackEvent fields
_TYPE = tag(9, VARINT)
_TRACK_UUID = tag(11, VARINT)
_NAME_IID = tag(10, VARINT)
_CATEGORY_IID = tag(3, VARINT)
_ANNOTATION = tag(4, LEN)
# DebugAnnotation fields
_ANNOTATION_NAME_IID = tag(1, VARINT)
_INT_VALUE = tag(4, VARINT)
_DOUBLE_VALUE = tag(5, FIXED64)
_STRING_VALUE_IID = tag(17, VARINT)


@dataclass
class Interned:
    """Ids of the trace's interned strings, and the debug-annotation string values a
    chunk adds (they must be sent before the chunk's slices use them)."""

    categories: dict[str, int]
    annotation_names: dict[str, int]
    strings: dict[str, int] = field(default_factory=dict)
    new_strings: list[tuple[int, str]] = field(default_factory=list)

    def string_iid(self, value: str) -> int:
        iid = self.strings.get(value)
        if iid is None:
            iid = self.strings[value] = len(self.strings) + 1
            self.new_strings.append((iid, value))
        return iid

    def string_iids(self, texts: Sequence[str], index: np.ndarray) -> np.ndarray:
        """The iid of ``texts[index[i]]`` for each row."""
        iids = np.array([self.string_iid(t) for t in texts], dtype=np.int64)
        result: np.ndarray = iids[index] if iids.shape[0] else np.zeros(0, dtype=np.int64)
        return result


# An arg's slot in a chunk's rows: shared by every kind that lists the same arg (the
# table's COMMON args are one object), unless the kinds list their args in orders that
# disagree (then the kind has a slot of its own). Args hold dicts: keyed by identity.
SlotKey = tuple[object, int]
_SHARED = "shared"


def merged_slots(
    kinds: Sequence[int | None],
) -> tuple[list[tuple[SlotKey, SliceArg]], dict[int | None, list[SlotKey]]]:
    """(one order of the args of all ``kinds`` that keeps each kind's own order, each
    kind's args' slots)."""
    order: list[tuple[SlotKey, SliceArg]] = []
    own: dict[int | None, list[SlotKey]] = {}
    for kind in kinds:
        last = -1
        mine: list[SlotKey] = []
        for arg in args_of(kind):
            key: SlotKey = (_SHARED, id(arg))
            keys = [k for k, _ in order]
            at = keys.index(key) if key in keys else -1
            if at > last:
                last = at
            else:
                if at >= 0:
                    key = (kind, id(arg))
                last += 1
                order.insert(last, (key, arg))
            mine.append(key)
        own[kind] = mine
    return order, own


@dataclass(frozen=True)
class _Values:
    """One arg on the rows of one kind: its DebugAnnotation value field and encoding,
    the values, and which of the rows have one (None: all of them)."""

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
    columns = [picked.column(c) for c in arg.columns]
    if arg.type is ArgType.INT:
        return _int(columns[0])
    if arg.type is ArgType.LABEL:
        assert arg.labels is not None
        labels = arg.labels
        codes, index = np.unique(columns[0], return_inverse=True)
        texts = [labels.label(int(c)) for c in codes.tolist()]
        return _strings(interned.string_iids(texts, index.reshape(-1)))
    if arg.type is ArgType.DIM3:
        texts, index = dim3_distinct(*columns)
        return _strings(interned.string_iids(texts, index))
    if arg.type is ArgType.RATE:
        rate = rate_thousandths(columns[0], duration_ns) / 1000
        return _doubles(rate, has_rate(duration_ns))
    if arg.type is ArgType.PEER_DEVICE:
        return _int(picked.column("dst_device"), picked.column("copy_kind") == PEER_COPY)
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


@dataclass(frozen=True)
class _KindRows:
    """The rows of a chunk that hold slices of one kind."""

    kind: int | None
    index: np.ndarray  # their positions in the chunk
    mask: np.ndarray  # one bool per row of the chunk (one object: presence groups merge)


def _slot(
    parts: Sequence[tuple[_KindRows, _Values]], rows: int, everyone: bool
) -> tuple[list[Piece], np.ndarray | None]:
    """(an arg's value field over the chunk's rows, the rows that have the arg or None
    for all): the kinds that have the arg each give their rows' values."""
    first = parts[0][1]
    filled = [v.values for _, v in parts if v.values.shape[0]]
    if first.varint and filled:
        low = min(int(v.min()) for v in filled)
        high = max(int(v.max()) for v in filled)
    else:
        low, high = 0, 1
    if len(parts) == 1 and parts[0][0].index.shape[0] == rows:
        column = first.values
    elif low == high:
        column = np.full(1, low, dtype=np.int64)  # a literal: no per-row bytes
    else:
        column = np.zeros(rows, dtype=first.values.dtype)
        for kind_rows, value in parts:
            column[kind_rows.index] = value.values
    field: list[Piece] = [first.tag, varints(column) if first.varint else fixed64(column)]
    if all(v.present is None for _, v in parts):
        if everyone:
            return field, None
        if len(parts) == 1:
            return field, parts[0][0].mask
    present = np.zeros(rows, dtype=bool)
    for kind_rows, value in parts:
        present[kind_rows.index] = True if value.present is None else value.present
    return field, None if present.all() else present


def _annotations(
    track: SliceTrack,
    sel: np.ndarray,
    kinds: np.ndarray,
    interned: Interned,
) -> tuple[list[Piece], np.ndarray]:
    """Every arg of the chunk's slices, and each row's category iid."""
    rows = sel.shape[0]
    known = np.isin(kinds, list(CATEGORIES))
    present_kinds: list[int | None] = [*np.unique(kinds[known]).tolist()]
    if not known.all():
        present_kinds.append(None)  # kinds this version does not know: generic args
    category = np.zeros(rows, dtype=np.int64)
    parts: dict[SlotKey, list[tuple[_KindRows, _Values]]] = {}
    order, own = merged_slots(present_kinds)
    for kind in present_kinds:
        mask = ~known if kind is None else kinds == kind
        kind_rows = _KindRows(kind, np.flatnonzero(mask), mask)
        category[kind_rows.index] = interned.categories[category_of(kind)]
        picked = Selection(track, sel[kind_rows.index])
        duration = track.duration_ns[sel[kind_rows.index]]
        for arg, key in zip(args_of(kind), own[kind], strict=True):
            parts.setdefault(key, []).append((kind_rows, _value(arg, picked, duration, interned)))
    pieces: list[Piece] = []
    for key, arg in order:
        everyone = len(parts[key]) == len(present_kinds)
        field, present = _slot(parts[key], rows, everyone)
        name = _ANNOTATION_NAME_IID + varint(interned.annotation_names[arg.name])
        annotation = message(_ANNOTATION, [name, *field])
        pieces += annotation if present is None else optional(annotation, present)
    return pieces, category


def slice_packets(
    track: SliceTrack, sel: np.ndarray, uuids: np.ndarray, interned: Interned
) -> bytes:
    """The begin and end packets of the slices ``sel`` of ``track``, in time order, as
    ``Trace.packet`` entries. ``uuids``: each lane's track uuid."""
    start = track.start_ns[sel]
    uuid = [_TRACK_UUID, varints(uuids[track.lane[sel]])]
    annotations, category = _annotations(track, sel, track.kind[sel], interned)
    begin_event: list[Piece] = [
        _TYPE + varint(_SLICE_BEGIN),
        *uuid,
        _NAME_IID,
        varints(track.name_id[sel] + 1),
        _CATEGORY_IID,
        varints(category),
        *annotations,
    ]
    begin = [_TIMESTAMP, varints(start), _SEQUENCE, *message(_TRACK_EVENT, begin_event)]
    end_event: list[Piece] = [_TYPE + varint(_SLICE_END), *uuid]
    end_time = start + track.duration_ns[sel]
    end = [_TIMESTAMP, varints(end_time), _SEQUENCE, *message(_TRACK_EVENT, end_event)]
    return encode_rows([*message(_PACKET, begin), *message(_PACKET, end)], sel.shape[0])


__all__ = ["SEQUENCE_ID", "Interned", "SlotKey", "merged_slots", "slice_packets"]
