"""Perfetto slice packets of one track, built from whole columns: the export's hot loop.

Each slice is two ``TracePacket``s on the trace's one sequence, a ``TYPE_SLICE_BEGIN``
track event (name, category and debug annotations by interned id, values of string
args by interned id) and a ``TYPE_SLICE_END``, both with absolute timestamps. A chunk
of slices is encoded as rows of one byte matrix (``protowire``), one row per slice, so
no protobuf object is made per slice. Slices go out in time order whatever their kind
(an end and a begin at the same instant on a lane must stay in that order, or a
timestamp sort would nest them), so a row has a slot for every arg of every kind in
the chunk and keeps only its own kind's, in the table's order. Flow ids are fields only
the rows that start or end a flow keep.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from tfprof.collector.export.args import (
    Dim3Codes,
    Selection,
    arg_column,
    has_rate,
    pick,
    rate_thousandths,
)
from tfprof.collector.export.flow_ends import ChunkFlows
from tfprof.collector.export.protowire import (
    FIXED64,
    LEN,
    VARINT,
    Field,
    Piece,
    choice,
    encoded_rows,
    fixed64,
    message,
    optional,
    tag,
    varint,
    varints,
)
from tfprof.collector.timeline.model import SliceTrack
from tfprof.core.cupti_labels import PEER_COPY, Labels
from tfprof.core.records import RecordKind
from tfprof.core.slice_args import SLICE_CATEGORIES, ArgType, SliceArg, args_of, category_of

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
    names: Sequence[str] = ()  # the timeline's names (MARKER categories are among them)
    strings: dict[str, int] = field(default_factory=dict)
    new_strings: list[tuple[int, str]] = field(default_factory=list)
    new_categories: list[tuple[int, str]] = field(default_factory=list)  # MARKERs' own
    dims: Dim3Codes = field(default_factory=Dim3Codes)
    _dim_iids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    _label_iids: dict[int, np.ndarray] = field(default_factory=dict)  # by id(Labels)

    def string_iid(self, value: str) -> int:
        iid = self.strings.get(value)
        if iid is None:
            iid = self.strings[value] = len(self.strings) + 1
            self.new_strings.append((iid, value))
        return iid

    def category_iid(self, name: str) -> int:
        iid = self.categories.get(name)
        if iid is None:
            iid = self.categories[name] = len(self.categories) + 1
            self.new_categories.append((iid, name))
        return iid

    def dim_iids(self, x: np.ndarray, y: np.ndarray, z: np.ndarray) -> np.ndarray:
        """The iid of each row's ``"(x, y, z)"``."""
        codes = self.dims.codes(x, y, z)
        done = self._dim_iids.shape[0]
        if done < len(self.dims.texts):
            new = [self.string_iid(t) for t in self.dims.texts[done:]]
            self._dim_iids = np.concatenate([self._dim_iids, np.array(new, dtype=np.int64)])
        iids: np.ndarray = np.take(self._dim_iids, codes)
        return iids

    def label_iids(self, labels: Labels, values: np.ndarray) -> np.ndarray:
        """The iid of each value's label (values CUPTI may add later: the fallback's)."""
        top = labels.max_value + 1  # the fallback's code
        codes = np.where((values >= 0) & (values < top), values, top)
        table = self._label_iids.setdefault(id(labels), np.zeros(top + 1, dtype=np.int64))
        used = np.bincount(codes, minlength=top + 1) > 0
        for code in np.flatnonzero(used & (table == 0)).tolist():
            text = labels.label(code) if code < top else labels.fallback
            table[code] = self.string_iid(text)
        iids: np.ndarray = np.take(table, codes)
        return iids

    def string_iids(self, texts: Sequence[str], index: np.ndarray) -> np.ndarray:
        """The iid of ``texts[index[i]]`` for each row."""
        iids = np.array([self.string_iid(t) for t in texts], dtype=np.int64)
        result: np.ndarray = iids[index] if iids.shape[0] else np.zeros(0, dtype=np.int64)
        return result


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


def _annotations(
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


def kind_blocks(track: SliceTrack, a: int, b: int) -> list[np.ndarray]:
    """The slices ``[a, b)`` of ``track`` as blocks of one kind each (ascending within),
    encoded one after the other: rows of one kind are all as wide (``protowire``), so
    a block is one copy, not a byte mask. Or the run whole, in time order, when the
    order of the file could change what a reader makes of it: trace_processor sorts
    packets by timestamp, the file's order only among equal ones, so a begin at the
    time another kind's slice begins or ends keeps its place (a stack of slices is
    built in that order)."""
    kinds = track.kind[a:b]
    run = [np.arange(a, b)]
    if b - a < 2 or int(kinds.min()) == int(kinds.max()):
        return run
    start = track.start_ns[a:b]  # ascending
    same_start = start[1:] == start[:-1]
    if bool((same_start & (kinds[1:] != kinds[:-1])).any()):
        return run  # of equal starts, any two kinds are next to each other somewhere
    # Of the slices starting when one ends, all are of one kind (above): the first's.
    end = start + track.duration_ns[a:b]
    if bool((end[:-1] <= start[1:]).all()):
        # No slice overlaps the next (a stream runs one at a time): the first to start
        # when a slice ends, if any, is the next one.
        touching = (end[:-1] == start[1:]) & (kinds[1:] != kinds[:-1])
    else:
        at = np.minimum(np.searchsorted(start, end), start.shape[0] - 1)
        touching = (start[at] == end) & (kinds[at] != kinds)
    if bool(touching.any()):
        return run
    present = np.flatnonzero(np.bincount(kinds - int(kinds.min()))) + int(kinds.min())
    return [a + np.flatnonzero(kinds == k) for k in present.tolist()]


def as_run(sel: np.ndarray) -> np.ndarray | slice:
    """``sel`` as a slice when it is consecutive slices (a chunk of a track): the
    track's columns are then read as views, not gathered."""
    n = sel.shape[0]
    if n and int(sel[-1]) - int(sel[0]) == n - 1 and (n < 3 or bool((np.diff(sel) == 1).all())):
        return slice(int(sel[0]), int(sel[-1]) + 1)
    return sel


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


_FLOW_ID = tag(47, FIXED64)  # TrackEvent.flow_ids: flows leaving this slice
_TERMINATING_FLOW_ID = tag(48, FIXED64)  # TrackEvent.terminating_flow_ids: the one ending here


def _flow_pieces(flows: ChunkFlows) -> list[Piece]:
    """The flow ids each slice starts and ends (fields on no other row)."""
    pieces: list[Piece] = []
    counts = flows.out_counts()
    most = int(counts.max()) if counts.shape[0] else 0
    if most:
        # A call may launch several records (a graph launch): k-th id at item k of the row.
        item = len(_FLOW_ID) + 8
        rows = counts.shape[0]
        data = np.zeros((rows, most, item), dtype=np.uint8)
        first = np.searchsorted(flows.out_rows, flows.out_rows, side="left")
        k = np.arange(flows.out_rows.shape[0]) - first
        data[flows.out_rows, k, : len(_FLOW_ID)] = np.frombuffer(_FLOW_ID, dtype=np.uint8)
        ids = fixed64(flows.out_ids.astype(np.uint64)).data
        data[flows.out_rows, k, len(_FLOW_ID) :] = ids
        pieces.append(Field(data.reshape(rows, most * item), counts * item))
    present = flows.in_ids != 0
    if present.any():
        ending: list[Piece] = [_TERMINATING_FLOW_ID, fixed64(flows.in_ids.astype(np.uint64))]
        pieces += optional(ending, present)
    return pieces


@dataclass(frozen=True)
class Packets:
    """Rows of packets laid out (their fields encoded), made into bytes by ``finish``:
    on the reporter's pipeline, another thread. ``prefix``: bytes before them."""

    pieces: Sequence[Piece]
    rows: int
    prefix: bytes = b""

    def finish(self) -> bytes | memoryview:
        packets = encoded_rows(self.pieces, self.rows)
        return self.prefix + packets if self.prefix else packets


def slice_packets(
    track: SliceTrack,
    sel: np.ndarray,
    uuids: np.ndarray,
    interned: Interned,
    flows: ChunkFlows | None = None,
) -> bytes:
    """The begin and end packets of the slices ``sel`` of ``track``, in time order, as
    ``Trace.packet`` entries. ``uuids``: each lane's track uuid; ``flows``: the launch
    flows these slices start and end (``sel`` is then one run of the track)."""
    return bytes(slice_layout(track, sel, uuids, interned, flows).finish())


def slice_layout(
    track: SliceTrack,
    sel: np.ndarray,
    uuids: np.ndarray,
    interned: Interned,
    flows: ChunkFlows | None = None,
) -> Packets:
    """``slice_packets`` laid out, not yet made into bytes (``Packets.finish``)."""
    rows = sel.shape[0]
    sel_run = as_run(sel)
    start = pick(track.start_ns, sel_run)
    uuid = [_TRACK_UUID, varints(np.take(uuids, pick(track.lane, sel_run)))]
    annotations, category = _annotations(track, sel_run, pick(track.kind, sel_run), interned)
    begin_event: list[Piece] = [
        _TYPE + varint(_SLICE_BEGIN),
        *uuid,
        _NAME_IID,
        varints(pick(track.name_id, sel_run) + 1),
        _CATEGORY_IID,
        varints(category),
        *annotations,
        *(_flow_pieces(flows) if flows is not None else []),
    ]
    begin = [_TIMESTAMP, varints(start), _SEQUENCE, *message(_TRACK_EVENT, begin_event)]
    end_event: list[Piece] = [_TYPE + varint(_SLICE_END), *uuid]
    end_time = start + pick(track.duration_ns, sel_run)
    end = [_TIMESTAMP, varints(end_time), _SEQUENCE, *message(_TRACK_EVENT, end_event)]
    return Packets([*message(_PACKET, begin), *message(_PACKET, end)], rows)


__all__ = [
    "SEQUENCE_ID",
    "Interned",
    "Packets",
    "kind_blocks",
    "slice_layout",
    "slice_packets",
    "split_args",
]
