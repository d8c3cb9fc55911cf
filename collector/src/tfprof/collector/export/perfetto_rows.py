"""Perfetto slice packets of one track, built from whole columns: the export's hot loop.

Each slice is two ``TracePacket``s on the trace's one sequence, a ``TYPE_SLICE_BEGIN``
track event (name, category and debug annotations by interned id, values of string
args by interned id) and a ``TYPE_SLICE_END``, both with absolute timestamps. A chunk
of slices is encoded as rows of one byte matrix (``protowire``), one row per slice, so
no protobuf object is made per slice. Slices go out in time order whatever their kind
(an end and a begin at the same instant on a lane must stay in that order, or a
timestamp sort would nest them), so a row has a slot for every arg of every kind in
the chunk and keeps only its own kind's, in the table's order. Flow ids are fields only
the rows that start or end a flow keep. The args' annotations are ``perfetto_args``'s,
the interned ids ``perfetto_interning``'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tfprof.collector.export.args import pick
from tfprof.collector.export.flow_ends import ChunkFlows
from tfprof.collector.export.perfetto_args import chunk_annotations
from tfprof.collector.export.perfetto_interning import Interned
from tfprof.collector.export.protowire import (
    FIXED64,
    LEN,
    VARINT,
    Field,
    Piece,
    encoded_rows,
    fixed64,
    message,
    optional,
    tag,
    varint,
    varints,
)
from tfprof.collector.timeline.model import SliceTrack

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
    annotations, category = chunk_annotations(track, sel_run, pick(track.kind, sel_run), interned)
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
    "Packets",
    "kind_blocks",
    "slice_layout",
    "slice_packets",
]
