"""Perfetto's native protobuf trace (``.pftrace``): the format to use for large timelines.

A Perfetto trace is a ``Trace`` message, ``repeated TracePacket packet = 1``; two
serialised ``Trace`` messages concatenated are one ``Trace`` holding both packet lists
(protobuf merges repeated fields). So the file is written a chunk of packets at a
time, each chunk serialised on its own (descriptors, names and counters with the
classes of the ``perfetto`` package, slices straight from the columns): memory stays
bounded whatever the trace size.

Layout, mirroring the Chrome export so both look the same in ui.perfetto.dev:

- a clock snapshot maps the trace's time 0 to the collector's realtime clock
  (``Timeline.origin_ns``): slices are written relative to the earliest event, as in
  the Chrome export, and importers recover absolute times from the snapshot;
- one process track per pseudo-device (or per physical GPU with ``group_by="gpu"``)
  with the same names and sort order as Chrome's ``process_name`` /
  ``process_sort_index``, one thread track per lane;
- each slice is a ``TYPE_SLICE_BEGIN`` carrying the args as debug annotations and a
  ``TYPE_SLICE_END``; event names, categories, annotation names and the values of
  string args are interned (``interned_data``) on one packet sequence, so a slice's
  packets hold only numbers; they are encoded a chunk of slices at a time straight
  from the columns (``perfetto_rows``), no protobuf object per slice;
- launch flows: the API call's begin carries the ids of the flows it starts
  (``flow_ids``, several for a graph launch), the GPU slice's begin the one it ends
  (``terminating_flow_ids``); ids as in the Chrome export (``flow_ends``);
- a MARKER's own category (``cpu_op``, ``tf_op``, an NVTX domain) is interned when a
  chunk first uses it;
- host metrics and device memory (``gpu:N allocated_bytes``, in bytes) are counter
  tracks under the task's ``.../cpu`` process.

Slice and counter packets are written in ``compressed_packets`` (deflate), the way
Perfetto's own tracing service compresses traces (``TraceConfig.compression_type``);
trace_processor and ui.perfetto.dev inflate them as they read. Args repeat from slice to
slice (a kernel's grid, block and registers, a stream's device and context), so the
compressed packets take about a quarter of the space. The descriptors and interned
names at the start of the file stay uncompressed.
"""

from __future__ import annotations

import zlib
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial

import numpy as np
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pftrace

from tfprof.collector.export.flow_ends import TrackFlows
from tfprof.collector.export.output import BinaryOutput
from tfprof.collector.export.perfetto_rows import SEQUENCE_ID, Interned, slice_packets
from tfprof.collector.export.protowire import LEN, tag, varint
from tfprof.collector.timeline import CounterTrack, SliceTrack, Timeline
from tfprof.core.slice_args import BY_KIND, OTHER_CATEGORY, SLICE_CATEGORIES

NAMES_PER_PACKET = 4096
CHUNK_SLICES = 1 << 14  # slices encoded at once: measured fastest on a million
WIDE_FLOWS = 8  # a call starting more flows than this is encoded on its own
_COMPRESSED_PACKET = tag(1, LEN)  # Trace.packet holding only TracePacket.compressed_packets
_COMPRESSED_PACKETS = tag(50, LEN)
_CLEARED = pftrace.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
_NEEDS_STATE = pftrace.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
_COUNTER = pftrace.TrackEvent.TYPE_COUNTER
_BYTES = pftrace.CounterDescriptor.UNIT_SIZE_BYTES

# Every arg name of the table, in its order: the interned annotation name ids.
ANNOTATION_NAMES: tuple[str, ...] = tuple(
    dict.fromkeys(arg.name for args in BY_KIND.values() for arg in args)
)
CATEGORY_NAMES: tuple[str, ...] = (*dict.fromkeys(SLICE_CATEGORIES.values()), OTHER_CATEGORY)


def pick_deflate() -> Callable[[bytes], bytes]:
    """Data to a zlib stream (what ``compressed_packets`` holds) at the fastest level:
    ISA-L's, measured four times zlib's speed for the same size, else zlib's."""
    try:
        from isal import isal_zlib
    except ImportError:  # a platform without its wheel
        return partial(zlib.compress, level=1)
    return partial(isal_zlib.compress, level=1)


deflate = pick_deflate()


class TrackUuids:
    """Track uuids: a process's is its pid, then lanes by tid, then counters by index, all
    small numbers (every slice packet names its lane's: one byte instead of five)."""

    def __init__(self, timeline: Timeline) -> None:
        self._threads = 1 + max((p.pid for p in timeline.processes), default=0)
        tids = [t for track in timeline.slices for t in track.thread_ids]
        self._counters = self._threads + 1 + max(tids, default=0)

    def thread(self, tid: int) -> int:
        return self._threads + tid

    def counter(self, index: int) -> int:
        return self._counters + index


class PerfettoReporter:
    """Renders a ``Timeline`` as a Perfetto protobuf trace."""

    format_name = "perfetto"

    def __init__(
        self, timeline: Timeline, chunk_events: int = CHUNK_SLICES, compress: bool = True
    ) -> None:
        """``compress=False`` writes every packet plain (no ``compressed_packets``)."""
        self.timeline = timeline
        self.chunk_events = max(1, chunk_events)
        self.compress = compress
        self._uuids = TrackUuids(timeline)
        self._interned = Interned(
            categories={name: i + 1 for i, name in enumerate(CATEGORY_NAMES)},
            annotation_names={name: i + 1 for i, name in enumerate(ANNOTATION_NAMES)},
            names=timeline.names,
        )
        self._flows = TrackFlows(timeline.flows)

    def render(self, outfile: BinaryOutput) -> None:
        outfile.write(self._preamble().SerializeToString())
        for names in self._names():
            outfile.write(names.SerializeToString())
        outfile.write(self._descriptors().SerializeToString())
        # Deflate lets go of the GIL: one chunk is compressed while the next is encoded.
        # At most two wait, so memory stays bounded; the order of the chunks is kept.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="tfprof-deflate") as pool:
            waiting: deque[Future[bytes]] = deque()
            for packets in self._event_packets():
                waiting.append(pool.submit(self._compressed, packets))
                if len(waiting) > 2:
                    outfile.write(waiting.popleft().result())
            while waiting:
                outfile.write(waiting.popleft().result())

    def _event_packets(self) -> Iterator[bytes]:
        """Slice and counter packets, a chunk at a time (serialised ``Trace`` parts)."""
        for index, track in enumerate(self.timeline.slices):
            yield from self._slices(index, track)
        for index, counter in enumerate(self.timeline.counters):
            for trace in self._counter_values(index, counter):
                yield trace.SerializeToString()

    def _compressed(self, packets: bytes) -> bytes:
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
        for name, iid in self._interned.categories.items():
            interned.event_categories.add(iid=iid, name=name)
        for name, iid in self._interned.annotation_names.items():
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
                desc.uuid = self._uuids.thread(tid)
                desc.parent_uuid = track.pid
                desc.thread.pid = track.pid
                desc.thread.tid = tid
                desc.thread.thread_name = name
                desc.thread.legacy_sort_index = tid
        for index, counter in enumerate(self.timeline.counters):
            desc = self._packet(trace).track_descriptor
            desc.uuid = self._uuids.counter(index)
            desc.parent_uuid = counter.pid
            desc.name = counter.name
            if counter.name.endswith("_bytes"):
                desc.counter.unit = _BYTES
            elif counter.name == "cpu_percent":
                desc.counter.unit_name = "%"
            else:
                desc.counter.SetInParent()
        return trace

    def _slices(self, index: int, track: SliceTrack) -> Iterator[bytes]:
        """The track's slice packets in time order, a chunk at a time; strings and
        categories a chunk interns first go on a packet before it."""
        uuids = np.asarray([self._uuids.thread(t) for t in track.thread_ids], dtype=np.int64)
        for a, b in self._runs(index, len(track)):
            flows = self._flows.chunk(index, a, b) if self._flows else None
            packets = slice_packets(track, np.arange(a, b), uuids, self._interned, flows)
            interned = self._interned
            if interned.new_strings or interned.new_categories:
                trace = pftrace.Trace()
                data = self._packet(trace).interned_data
                for iid, value in interned.new_strings:
                    data.debug_annotation_string_values.add(iid=iid, str=value.encode())
                for iid, value in interned.new_categories:
                    data.event_categories.add(iid=iid, name=value)
                interned.new_strings.clear()
                interned.new_categories.clear()
                packets = trace.SerializeToString() + packets
            yield packets

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
        uuid = self._uuids.counter(index)
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
