"""Perfetto's native protobuf trace (``.pftrace``): the format to use for large timelines.

A Perfetto trace is a ``Trace`` message, ``repeated TracePacket packet = 1``; two
serialised ``Trace`` messages concatenated are one ``Trace`` holding both packet lists
(protobuf merges repeated fields). So the file is written a chunk of packets at a
time, each chunk serialised on its own (descriptors, names and counters with the
classes of the ``perfetto`` package, slices straight from the columns): memory stays
bounded whatever the trace size.

Layout:

- a clock snapshot maps the trace's time 0 to the collector's realtime clock
  (``Timeline.origin_ns``): slices are written relative to the earliest event, as in
  the Chrome export, and importers recover absolute times from the snapshot;
- named tracks nested as the Perfetto UI shows them (``perfetto_tracks``): a root per
  job, under it a row per pseudo-device named in full, in the timeline's sort order
  (the same names and order as Chrome's ``process_name`` / ``process_sort_index``), a
  row's lanes (Chrome's threads) as its children;
- each slice is a ``TYPE_SLICE_BEGIN`` carrying the args as debug annotations and a
  ``TYPE_SLICE_END``; event names, categories, annotation names and the values of
  string args are interned (``interned_data``) on one packet sequence, so a slice's
  packets hold only numbers; they are encoded a chunk of slices at a time straight
  from the columns (``perfetto_rows``), no protobuf object per slice;
- launch flows: the API call's begin carries the ids of the flows it starts
  (``flow_ids``, several for a graph launch), the GPU slice's begin the one it ends
  (``terminating_flow_ids``); ids as in the Chrome export (``flow_ends``). A part's
  tracks that start flows (its host threads) are written before the others, task by
  task:
  trace_processor orders packets by timestamp and, among equal ones, by their place in
  the file, and ignores the end of a flow it has not seen begin (no stat says so), so a
  kernel that starts the very nanosecond its launch does (a stream wait, a stream sync)
  must come after it in the file;
- a MARKER's own category (``cpu_op``, ``tf_op``, an NVTX domain) is interned when a
  chunk first uses it;
- host metrics and device memory (``gpu:N allocated_bytes``, in bytes) are counter
  tracks under the task's ``.../cpu`` row, named as the Chrome export's counters
  (``tfprof.core.counters``).

Descriptors for every row, lane and counter come first (the timeline's layout), then
the timeline one part (time chunk) at a time: the names it adds to the name table
(interned event names), then its slice and counter packets.

Slice and counter packets are written in ``compressed_packets`` (deflate), the way
Perfetto's own tracing service compresses traces (``TraceConfig.compression_type``);
trace_processor and ui.perfetto.dev inflate them as they read. Args repeat from slice to
slice (a kernel's grid, block and registers, a stream's device and context), so the
compressed packets take about a quarter of the space. The descriptors and interned
names before each part's packets stay uncompressed.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator
from functools import partial

import numpy as np
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pftrace

from tfprof.collector.export.flow_ends import TrackFlows
from tfprof.collector.export.output import BinaryOutput, BlockPipeline
from tfprof.collector.export.perfetto_interning import Interned
from tfprof.collector.export.perfetto_rows import (
    SEQUENCE_ID,
    Packets,
    kind_blocks,
    slice_layout,
)
from tfprof.collector.export.perfetto_tracks import TrackTree, TrackUuids
from tfprof.collector.export.protowire import LEN, tag, varint
from tfprof.collector.timeline.model import (
    CounterTrack,
    FlowMarks,
    SliceTrack,
    Timeline,
    TimelineLayout,
    TimelinePart,
)
from tfprof.core.slice_args import BY_KIND, OTHER_CATEGORY, SLICE_CATEGORIES

NAMES_PER_PACKET = 4096
# Slices encoded at once. Fewer, larger blocks spend less per block in Python and hold
# more while writing; 2**16 was the better trade (bench/export_formats.py and
# bench/perfetto_stages.py, bench/results/cpu-export.txt: "Stop 19").
CHUNK_SLICES = 1 << 16
WIDE_FLOWS = 8  # a call starting more flows than this is encoded on its own
_COMPRESSED_PACKET = tag(1, LEN)  # Trace.packet holding only TracePacket.compressed_packets
_COMPRESSED_PACKETS = tag(50, LEN)
_CLEARED = pftrace.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
_NEEDS_STATE = pftrace.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
_COUNTER = pftrace.TrackEvent.TYPE_COUNTER

# Every arg name of the table, in its order: the interned annotation name ids.
ANNOTATION_NAMES: tuple[str, ...] = tuple(
    dict.fromkeys(arg.name for args in BY_KIND.values() for arg in args)
)
CATEGORY_NAMES: tuple[str, ...] = (*dict.fromkeys(SLICE_CATEGORIES.values()), OTHER_CATEGORY)


def pick_deflate() -> Callable[[bytes | memoryview], bytes]:
    """Data to a zlib stream (what ``compressed_packets`` holds) at the fastest level:
    ISA-L's, several times zlib's speed at about the same size (bench/perfetto_stages.py,
    bench/results/cpu-export.txt), else zlib's."""
    try:
        from isal import isal_zlib
    except ImportError:  # a platform without its wheel
        return partial(zlib.compress, level=1)
    return partial(isal_zlib.compress, level=1)


deflate = pick_deflate()


def writing_order(part: TimelinePart) -> list[int]:
    """The part's slice tracks in the order they are written: task by task, each task's
    tracks that start flows (its host threads) first. Each flow's start then precedes
    its end in the file, which is what trace_processor goes by when both share a
    timestamp (a part holds every record of its time chunk: both ends of such a flow)."""
    sources = set(np.unique(part.starts.track).tolist())
    tasks: dict[tuple[str, str], int] = {}

    def place(index: int) -> tuple[int, bool]:
        key = part.slices[index].key
        return tasks.setdefault((key.job, key.task), len(tasks)), index not in sources

    return sorted(range(len(part.slices)), key=place)


class PerfettoReporter:
    """Renders a ``Timeline``, a part at a time, as a Perfetto protobuf trace."""

    format_name = "perfetto"

    def __init__(
        self,
        timeline: Timeline,
        chunk_events: int = CHUNK_SLICES,
        compress: bool = True,
    ) -> None:
        """``compress=False`` writes every packet plain (no ``compressed_packets``)."""
        self.timeline = timeline
        self.chunk_events = max(1, chunk_events)
        self.compress = compress
        self._tree = TrackTree()
        self._interned = Interned(
            categories={name: i + 1 for i, name in enumerate(CATEGORY_NAMES)},
            annotation_names={name: i + 1 for i, name in enumerate(ANNOTATION_NAMES)},
        )
        self._flows = TrackFlows(FlowMarks.empty(), FlowMarks.empty())
        self._names_sent = 0

    def render(self, outfile: BinaryOutput) -> None:
        timeline = self.timeline
        outfile.write(self._preamble(timeline.origin_ns).SerializeToString())
        outfile.write(self._descriptors(timeline.layout).SerializeToString())
        # Chunks are laid out here, made into bytes on a second thread, deflated and
        # written on a third (BlockPipeline): numpy and deflate let go of the GIL.
        with BlockPipeline(outfile) as pipeline:
            for part in timeline.parts():
                for names in self._names(part):
                    pipeline.put(partial(bytes, names.SerializeToString()))
                for packets in self._event_packets(part):
                    pipeline.put(packets.finish, then=self._compressed)
                del part  # its records go before the next part is read

    def _event_packets(self, part: TimelinePart) -> Iterator[Packets]:
        """Slice and counter packets, a chunk at a time (serialised ``Trace`` parts,
        made by ``Packets.finish``)."""
        self._interned.names = part.names
        self._flows = TrackFlows(part.starts, part.ends)
        for index in writing_order(part):
            yield from self._slices(index, part.slices[index])
        for counter in part.counters:
            for trace in self._counter_values(counter.index, counter):
                yield Packets((), 0, trace.SerializeToString())

    def _compressed(self, packets: bytes | memoryview) -> bytes | memoryview:
        if not self.compress or not packets:
            return packets
        data = deflate(packets)
        body = _COMPRESSED_PACKETS + varint(len(data)) + data
        return _COMPRESSED_PACKET + varint(len(body)) + body

    def _packet(self, trace: pftrace.Trace) -> pftrace.TracePacket:
        packet = trace.packet.add()
        packet.trusted_packet_sequence_id = SEQUENCE_ID
        packet.sequence_flags = _NEEDS_STATE
        return packet

    def _preamble(self, origin_ns: int) -> pftrace.Trace:
        trace = pftrace.Trace()
        packet = trace.packet.add()
        packet.trusted_packet_sequence_id = SEQUENCE_ID
        packet.first_packet_on_sequence = True
        packet.sequence_flags = _CLEARED
        packet.timestamp = 0
        for clock_id, value in (
            (pftrace.BUILTIN_CLOCK_BOOTTIME, 0),
            (pftrace.BUILTIN_CLOCK_REALTIME, origin_ns),
        ):
            clock = packet.clock_snapshot.clocks.add()
            clock.clock_id = clock_id
            clock.timestamp = value
        interned = packet.interned_data
        for name, iid in self._interned.categories.items():
            interned.event_categories.add(iid=iid, name=name)
        for name, iid in self._interned.annotation_names.items():
            interned.debug_annotation_names.add(iid=iid, name=name)
        return trace

    def _names(self, part: TimelinePart) -> Iterator[pftrace.Trace]:
        """The names the part adds to the table (iid: name id + 1); the read's name 0,
        "" (no name), is never a slice's."""
        names = part.names
        sent, self._names_sent = self._names_sent, len(names)
        if sent == 0 and names and names[0] == "":
            sent = 1
        for a in range(sent, len(names), NAMES_PER_PACKET):
            trace = pftrace.Trace()
            interned = self._packet(trace).interned_data
            for i, name in enumerate(names[a : a + NAMES_PER_PACKET], start=a):
                interned.event_names.add(iid=i + 1, name=name)
            yield trace

    def _descriptors(self, layout: TimelineLayout) -> pftrace.Trace:
        trace = pftrace.Trace()
        for desc in self._tree.descriptors(layout):
            self._packet(trace).track_descriptor.CopyFrom(desc)
        return trace

    def _slices(self, index: int, track: SliceTrack) -> Iterator[Packets]:
        """The track's slice packets in time order, a chunk at a time; strings and
        categories a chunk interns first go on a packet before it."""
        uuids = np.asarray(self._tree.lane_uuids(track), dtype=np.int64)
        for a, b in self._runs(index, len(track)):
            flows = self._flows.chunk(index, a, b) if self._flows else None
            for rows in kind_blocks(track, a, b):
                mine = (
                    flows.rows(rows - a) if flows is not None and rows.shape[0] < b - a else flows
                )
                yield self._interning(slice_layout(track, rows, uuids, self._interned, mine))

    def _interning(self, packets: Packets) -> Packets:
        """``packets`` after a packet of the strings and categories they intern first."""
        interned = self._interned
        if not (interned.new_strings or interned.new_categories):
            return packets
        trace = pftrace.Trace()
        data = self._packet(trace).interned_data
        for iid, value in interned.new_strings:
            data.debug_annotation_string_values.add(iid=iid, str=value.encode())
        for iid, value in interned.new_categories:
            data.event_categories.add(iid=iid, name=value)
        interned.new_strings.clear()
        interned.new_categories.clear()
        return Packets(packets.pieces, packets.rows, trace.SerializeToString())

    def _runs(self, index: int, n: int) -> Iterator[tuple[int, int]]:
        """Runs of the track's slices encoded at once: chunks, and a run of its own for
        each call that starts more than ``WIDE_FLOWS`` flows (a graph launch: every
        row of a run is as wide as its widest)."""
        cuts = set(range(0, n, self.chunk_events))
        if self._flows:
            wide = self._flows.wide(index, WIDE_FLOWS).tolist()
            cuts.update(wide)
            cuts.update(w + 1 for w in wide)
        bounds = sorted(c for c in cuts if c < n)
        yield from zip(bounds, [*bounds[1:], n], strict=True)

    def _counter_values(self, index: int, counter: CounterTrack) -> Iterator[pftrace.Trace]:
        uuid = TrackUuids.counter(index)
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
