"""Perfetto's native protobuf trace (``.pftrace``): the format to use for large timelines.

A Perfetto trace is a ``Trace`` message, ``repeated TracePacket packet = 1``; two
serialised ``Trace`` messages concatenated are one ``Trace`` holding both packet lists
(protobuf merges repeated fields). So the file is written a chunk of packets at a
time, each chunk a small ``Trace`` built with the classes of the ``perfetto`` package
and serialised on its own: memory stays bounded whatever the trace size.

Layout, mirroring the Chrome export so both look the same in ui.perfetto.dev:

- a clock snapshot maps the trace's time 0 to the collector's realtime clock
  (``Timeline.origin_ns``): slices are written relative to the earliest event, as in
  the Chrome export, and importers recover absolute times from the snapshot;
- one process track per pseudo-device (or per physical GPU with ``group_by="gpu"``)
  with the same names and sort order as Chrome's ``process_name`` /
  ``process_sort_index``, one thread track per lane;
- each slice is a ``TYPE_SLICE_BEGIN`` carrying the args as debug annotations and a
  ``TYPE_SLICE_END``; event names, categories, annotation names and repeated string
  values are interned (``interned_data``) on one packet sequence;
- host metrics are counter tracks under the task's ``.../cpu`` process.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pftrace

from tfprof.collector.export.args import ArgColumn, arg_columns
from tfprof.collector.export.output import CHUNK_EVENTS, BinaryOutput
from tfprof.collector.timeline import CounterTrack, SliceTrack, Timeline
from tfprof.core.slice_args import BY_KIND, CATEGORIES, OTHER_CATEGORY, ArgType, category_of

SEQUENCE_ID = 1  # every packet is on one sequence: interned ids are shared by all
NAMES_PER_PACKET = 4096
# Track uuids: processes are their pid, lanes (1 << 32) + tid, counters (2 << 32) + index.
_THREAD_UUID = 1 << 32
_COUNTER_UUID = 2 << 32
_CLEARED = pftrace.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
_NEEDS_STATE = pftrace.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
_BEGIN = pftrace.TrackEvent.TYPE_SLICE_BEGIN
_END = pftrace.TrackEvent.TYPE_SLICE_END
_COUNTER = pftrace.TrackEvent.TYPE_COUNTER
_BYTES = pftrace.CounterDescriptor.UNIT_SIZE_BYTES

# Every arg name of the table, in its order: the interned annotation name ids.
ANNOTATION_NAMES: tuple[str, ...] = tuple(
    dict.fromkeys(arg.name for args in BY_KIND.values() for arg in args)
)
CATEGORY_NAMES: tuple[str, ...] = (*dict.fromkeys(CATEGORIES.values()), OTHER_CATEGORY)


# (annotation name iid, DebugAnnotation field, one value per slice; None: absent)
_Annotations = tuple[int, str, list[Any]]


def thread_uuid(tid: int) -> int:
    return _THREAD_UUID + tid


class PerfettoReporter:
    """Renders a ``Timeline`` as a Perfetto protobuf trace."""

    format_name = "perfetto"

    def __init__(self, timeline: Timeline, chunk_events: int = CHUNK_EVENTS) -> None:
        self.timeline = timeline
        self.chunk_events = max(1, chunk_events)
        self._category_iid = {name: i + 1 for i, name in enumerate(CATEGORY_NAMES)}
        self._annotation_iid = {name: i + 1 for i, name in enumerate(ANNOTATION_NAMES)}
        self._strings: dict[str, int] = {}  # interned debug-annotation string values

    def render(self, outfile: BinaryOutput) -> None:
        for chunk in self._chunks():
            outfile.write(chunk.SerializeToString())

    def _chunks(self) -> Iterator[pftrace.Trace]:
        yield self._preamble()
        yield from self._names()
        yield self._descriptors()
        for track in self.timeline.slices:
            yield from self._slices(track)
        for index, counter in enumerate(self.timeline.counters):
            yield from self._counter_values(index, counter)

    def _packet(self, trace: pftrace.Trace) -> pftrace.TracePacket:
        packet = trace.packet.add()
        packet.trusted_packet_sequence_id = SEQUENCE_ID
        packet.sequence_flags = _NEEDS_STATE
        return packet

    def _preamble(self) -> pftrace.Trace:
        trace = pftrace.Trace()
        packet = trace.packet.add()
        packet.trusted_packet_sequence_id = SEQUENCE_ID
        packet.first_packet_on_sequence = True
        packet.sequence_flags = _CLEARED
        packet.timestamp = 0
        for clock_id, value in (
            (pftrace.BUILTIN_CLOCK_BOOTTIME, 0),
            (pftrace.BUILTIN_CLOCK_REALTIME, self.timeline.origin_ns),
        ):
            clock = packet.clock_snapshot.clocks.add()
            clock.clock_id = clock_id
            clock.timestamp = value
        interned = packet.interned_data
        for name, iid in self._category_iid.items():
            interned.event_categories.add(iid=iid, name=name)
        for name, iid in self._annotation_iid.items():
            interned.debug_annotation_names.add(iid=iid, name=name)
        return trace

    def _names(self) -> Iterator[pftrace.Trace]:
        names = self.timeline.names
        for a in range(0, len(names), NAMES_PER_PACKET):
            trace = pftrace.Trace()
            interned = self._packet(trace).interned_data
            for i, name in enumerate(names[a : a + NAMES_PER_PACKET], start=a):
                interned.event_names.add(iid=i + 1, name=name)
            yield trace

    def _descriptors(self) -> pftrace.Trace:
        trace = pftrace.Trace()
        for proc in self.timeline.processes:
            desc = self._packet(trace).track_descriptor
            desc.uuid = proc.pid
            desc.process.pid = proc.pid
            desc.process.process_name = proc.name
            desc.process.legacy_sort_index = proc.sort_index
        for track in self.timeline.slices:
            for tid, name in zip(track.thread_ids, track.thread_names, strict=True):
                desc = self._packet(trace).track_descriptor
                desc.uuid = thread_uuid(tid)
                desc.parent_uuid = track.pid
                desc.thread.pid = track.pid
                desc.thread.tid = tid
                desc.thread.thread_name = name
                desc.thread.legacy_sort_index = tid
        for index, counter in enumerate(self.timeline.counters):
            desc = self._packet(trace).track_descriptor
            desc.uuid = _COUNTER_UUID + index
            desc.parent_uuid = counter.pid
            desc.name = counter.name
            if counter.name.endswith("_bytes"):
                desc.counter.unit = _BYTES
            elif counter.name == "cpu_percent":
                desc.counter.unit_name = "%"
            else:
                desc.counter.SetInParent()
        return trace

    def _string_iid(self, value: str, interned: pftrace.InternedData) -> int:
        iid = self._strings.get(value)
        if iid is None:
            iid = self._strings[value] = len(self._strings) + 1
            interned.debug_annotation_string_values.add(iid=iid, str=value.encode())
        return iid

    def _slices(self, track: SliceTrack) -> Iterator[pftrace.Trace]:
        # Slices go out in time order, whatever their kind: one slice's end and the next
        # one's begin at the same instant on a lane must stay in that order, or the
        # trace processor (which sorts packets by timestamp, stably) would nest them.
        uuids = [thread_uuid(t) for t in track.thread_ids]
        n = int(track.start_ns.shape[0])
        for a in range(0, n, self.chunk_events):
            sel = np.arange(a, min(n, a + self.chunk_events))
            trace = pftrace.Trace()
            # New string values of this chunk go on its first packet, before any use.
            interned = self._packet(trace).interned_data
            kinds = track.kind[sel]
            known = np.isin(kinds, list(CATEGORIES))
            # Per row: its kind's category and args, and its place among that kind's rows.
            group = np.zeros(sel.shape[0], dtype=np.int64)
            place = np.zeros(sel.shape[0], dtype=np.int64)
            groups: list[tuple[int, list[_Annotations]]] = []
            for kind in [*np.unique(kinds[known]).tolist(), None]:
                mask = ~known if kind is None else kinds == kind
                rows = np.flatnonzero(mask)
                if rows.shape[0] == 0:
                    continue
                group[rows] = len(groups)
                place[rows] = np.arange(rows.shape[0])
                args = [
                    self._annotations(column, rows.shape[0], interned)
                    for column in arg_columns(track, kind, sel[rows])
                ]
                groups.append((self._category_iid[category_of(kind)], args))
            starts = track.start_ns[sel].tolist()
            ends = track.end_ns[sel].tolist()
            names = (track.name_id[sel] + 1).tolist()
            lanes = track.lane[sel].tolist()
            rows_out = zip(starts, ends, names, lanes, group.tolist(), place.tolist(), strict=True)
            for start, end, name, lane, g, i in rows_out:
                category, args = groups[g]
                uuid = uuids[lane]
                begin = self._packet(trace)
                begin.timestamp = start
                event = begin.track_event
                event.type = _BEGIN
                event.track_uuid = uuid
                event.name_iid = name
                event.category_iids.append(category)
                annotations = event.debug_annotations
                for iid, field, values in args:
                    value = values[i]
                    if value is not None:
                        annotations.add(name_iid=iid, **{field: value})
                finish = self._packet(trace)
                finish.timestamp = end
                finish.track_event.type = _END
                finish.track_event.track_uuid = uuid
            yield trace

    def _annotations(
        self, column: ArgColumn, count: int, interned: pftrace.InternedData
    ) -> _Annotations:
        """(name iid, DebugAnnotation field, one value per slice, None where absent)."""
        iid = self._annotation_iid[column.arg.name]
        values = column.values
        if column.where is not None:  # a sparse arg: absent on the other slices
            dense: list[Any] = [None] * count
            for i, value in zip(column.where.tolist(), values, strict=True):
                dense[i] = value
            return iid, "int_value", dense
        arg_type = column.arg.type
        if arg_type in (ArgType.LABEL, ArgType.DIM3):
            return iid, "string_value_iid", [self._string_iid(v, interned) for v in values]
        if arg_type is ArgType.RATE:
            return iid, "double_value", [None if math.isnan(v) else v for v in values]
        return iid, "int_value", values

    def _counter_values(self, index: int, counter: CounterTrack) -> Iterator[pftrace.Trace]:
        uuid = _COUNTER_UUID + index
        floats = counter.values.dtype.kind == "f"
        for a in range(0, counter.time_ns.shape[0], self.chunk_events):
            b = a + self.chunk_events
            trace = pftrace.Trace()
            times = counter.time_ns[a:b].tolist()
            values = counter.values[a:b].tolist()
            for time, value in zip(times, values, strict=True):
                packet = self._packet(trace)
                packet.timestamp = time
                event = packet.track_event
                event.type = _COUNTER
                event.track_uuid = uuid
                if floats:
                    event.double_counter_value = value
                else:
                    event.counter_value = value
            yield trace
