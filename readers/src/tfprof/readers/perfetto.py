"""tfprof's own Perfetto export (``.pftrace``) into records.

Packets are read one at a time; interned names, categories and annotations are
resolved; each begin/end pair on a lane becomes a complete Chrome event with its debug
annotations as args, each counter value a Chrome counter event, under the process and
thread names of the track descriptors, and those events go through the reader of our
Chrome export. The clock snapshot gives back the absolute start. Perfetto's protobuf
classes come from the ``perfetto`` package, imported only when a file is read
(``tfprof.core`` is standard library only).

Both layouts the export has written are read (``_Tracks``): process and thread tracks
(a pseudo-device a process, its lanes threads), and the named tracks of today's
(``tfprof.collector.export.perfetto_tracks``): a root per job (``/job:J``), rows under
it (processes: slices on a row are its lane 0), the rows' children (threads).
"""

from __future__ import annotations

import importlib
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from tfprof.core.counters import counter_parts, title_series
from tfprof.core.errors import FormatUnavailable, TraceFormatError
from tfprof.readers.event_fields import metadata_event, ns_to_us
from tfprof.readers.events import load_events
from tfprof.readers.tfprof_chrome import TOOL_NAME, gpu_track
from tfprof.readers.trace import Event, RecordedTrace

PERFETTO_SUFFIXES = (".pftrace", ".perfetto-trace", ".perfetto")
_PACKET_TAG = 0x0A  # Trace: repeated TracePacket packet = 1 (length-delimited)


def _trace_protos() -> ModuleType:
    try:
        return importlib.import_module("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
    except ImportError:
        raise FormatUnavailable(
            "reading Perfetto traces needs Perfetto's protos: pip install perfetto"
        ) from None


# Packets are split by hand (one tag, one varint length each) and parsed one at a time:
# ``Trace.FromString`` on the whole file would hold every packet's message objects at
# once, several times the file's size, and protobuf offers no streaming parser.
def _varint(data: memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise IndexError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _packets(where: str, data: bytes) -> Iterator[bytes]:
    """The serialised packets of a ``Trace``."""
    view = memoryview(data)
    pos = 0
    while pos < len(view):
        try:
            tag, pos = _varint(view, pos)
            if tag != _PACKET_TAG:
                raise TraceFormatError(f"{where}: not a Perfetto trace (field tag {tag:#x})")
            length, pos = _varint(view, pos)
        except IndexError:
            raise TraceFormatError(f"{where}: truncated Perfetto trace") from None
        if pos + length > len(view):
            raise TraceFormatError(f"{where}: truncated Perfetto trace")
        yield bytes(view[pos : pos + length])
        pos += length


def _parsed(where: str, data: bytes, pftrace: ModuleType) -> Iterator[Any]:
    """Each packet parsed (one object, reused), those inside ``compressed_packets``
    (deflate, as Perfetto's tracing service and our export write them) in their place."""
    from google.protobuf.message import DecodeError  # perfetto's own dependency

    packet = pftrace.TracePacket()
    for raw in _packets(where, data):
        try:
            packet.ParseFromString(raw)
        except DecodeError as exc:
            raise TraceFormatError(f"{where}: corrupt Perfetto packet ({exc})") from None
        if not packet.HasField("compressed_packets"):
            yield packet
            continue
        try:
            inner = zlib.decompress(packet.compressed_packets)
        except zlib.error as exc:
            raise TraceFormatError(
                f"{where}: corrupt compressed Perfetto packets ({exc})"
            ) from None
        yield from _parsed(where, inner, pftrace)


class _Interned:
    """The interned strings of a trace so far, by iid."""

    def __init__(self) -> None:
        self.names: dict[int, str] = {}
        self.categories: dict[int, str] = {}
        self.annotation_names: dict[int, str] = {}
        self.strings: dict[int, str] = {}

    def update(self, interned: Any) -> None:
        self.names.update((e.iid, e.name) for e in interned.event_names)
        self.categories.update((e.iid, e.name) for e in interned.event_categories)
        self.annotation_names.update((e.iid, e.name) for e in interned.debug_annotation_names)
        self.strings.update(
            (e.iid, e.str.decode("utf-8", "replace"))
            for e in interned.debug_annotation_string_values
        )

    def slice_event(self, event: Any, pid: int, tid: int, ts: int) -> Event:
        """A begun slice as a Chrome complete event (``ts`` in ns until it ends)."""
        name = self.names.get(event.name_iid, "") if event.name_iid else event.name
        cats = [self.categories.get(i, "") for i in event.category_iids] or list(event.categories)
        args = {
            (self.annotation_names.get(a.name_iid, "") if a.name_iid else a.name): self._value(a)
            for a in event.debug_annotations
        }
        return {"ph": "X", "pid": pid, "tid": tid, "name": name,
                "cat": cats[0] if cats else "", "ts": ts, "args": args}  # fmt: skip

    def _value(self, annotation: Any) -> Any:
        which = annotation.WhichOneof("value")
        if which == "string_value_iid":
            return self.strings.get(annotation.string_value_iid, "")
        if which is None:
            return None
        return getattr(annotation, which)


_JOB_ROOT = re.compile(r"/job:[^/]+")


class _Tracks:
    """What each track descriptor is in Chrome's terms: the (pid, tid) a slice on it
    belongs to, the pid of a counter's process, and the ``process_name`` and
    ``thread_name`` events naming them."""

    def __init__(self) -> None:
        self.lane_of: dict[int, tuple[int, int]] = {}  # track uuid -> (pid, tid)
        self.pid_of: dict[int, int] = {}  # process or row uuid -> pid
        self.counters: dict[int, tuple[int, str]] = {}  # counter uuid -> (pid, title)
        self.roots: set[int] = set()
        self.rows: dict[int, str] = {}  # named row uuid -> its name
        self.names: list[Event] = []  # metadata events
        self._next = 0  # pids and tids made up for named tracks, past any pid written

    def _made_up(self) -> int:
        self._next += 1
        return self._next

    def add(self, desc: Any) -> None:
        if desc.HasField("process"):
            process = desc.process
            self.pid_of[desc.uuid] = process.pid
            self._next = max(self._next, process.pid)
            self.names.append(metadata_event("process_name", process.pid, process.process_name))
        elif desc.HasField("thread"):
            thread = desc.thread
            self.lane_of[desc.uuid] = (thread.pid, thread.tid)
            self._next = max(self._next, thread.pid, thread.tid)
            self.names.append(
                metadata_event("thread_name", thread.pid, thread.thread_name, thread.tid)
            )
        elif desc.HasField("counter"):
            self.counters[desc.uuid] = (self.pid_of.get(desc.parent_uuid, 0), desc.name)
        elif not desc.parent_uuid and _JOB_ROOT.fullmatch(desc.name):
            self.roots.add(desc.uuid)
        elif not desc.parent_uuid or desc.parent_uuid in self.roots:
            pid, tid = self._made_up(), self._made_up()
            self.pid_of[desc.uuid] = pid
            self.lane_of[desc.uuid] = (pid, tid)  # lane 0 of a pseudo-device's own row
            self.names.append(metadata_event("process_name", pid, desc.name))
            self.names.append(metadata_event("thread_name", pid, "lane 0", tid))
        elif desc.parent_uuid in self.pid_of:
            pid, tid = self.pid_of[desc.parent_uuid], self._made_up()
            self.lane_of[desc.uuid] = (pid, tid)
            self.names.append(metadata_event("thread_name", pid, desc.name, tid))


def _counter_event(pid: int, title: str, time_ns: int, event: Any) -> Event | None:
    """A counter value as the Chrome export writes it; None for a counter not ours."""
    series = title_series(title)
    if series is None:
        return None
    which = event.WhichOneof("counter_value_field")
    value = getattr(event, which) if which else 0
    name, key = counter_parts(series)
    return {"ph": "C", "pid": pid, "name": name, "ts": ns_to_us(time_ns), "args": {key: value}}


def read_perfetto(where: str) -> RecordedTrace:
    pftrace = _trace_protos()
    data = Path(where).read_bytes()
    interned = _Interned()
    tracks = _Tracks()
    events: list[Event] = []
    open_slices: dict[int, list[Event]] = {}
    origin = 0
    begin, end = pftrace.TrackEvent.TYPE_SLICE_BEGIN, pftrace.TrackEvent.TYPE_SLICE_END
    counter = pftrace.TrackEvent.TYPE_COUNTER
    for packet in _parsed(where, data, pftrace):
        if packet.HasField("clock_snapshot"):
            clocks = {c.clock_id: c.timestamp for c in packet.clock_snapshot.clocks}
            if pftrace.BUILTIN_CLOCK_REALTIME in clocks:
                base = clocks.get(pftrace.BUILTIN_CLOCK_BOOTTIME, 0)
                origin = clocks[pftrace.BUILTIN_CLOCK_REALTIME] - base
        if packet.HasField("interned_data"):
            interned.update(packet.interned_data)
        if packet.HasField("track_descriptor"):
            tracks.add(packet.track_descriptor)
        if not packet.HasField("track_event"):
            continue
        event = packet.track_event
        if event.type == begin and event.track_uuid in tracks.lane_of:
            pid, tid = tracks.lane_of[event.track_uuid]
            slice_event = interned.slice_event(event, pid, tid, packet.timestamp)
            open_slices.setdefault(event.track_uuid, []).append(slice_event)
        elif event.type == end and open_slices.get(event.track_uuid):
            slice_event = open_slices[event.track_uuid].pop()
            start = slice_event["ts"]
            slice_event["ts"] = ns_to_us(start)
            slice_event["dur"] = ns_to_us(packet.timestamp - start)
            events.append(slice_event)
        elif event.type == counter and event.track_uuid in tracks.counters:
            pid, title = tracks.counters[event.track_uuid]
            value = _counter_event(pid, title, packet.timestamp, event)
            if value is not None:
                events.append(value)
    events[:0] = tracks.names
    if not any(gpu_track(str(e["args"].get("name", ""))) for e in tracks.names):
        raise TraceFormatError(
            f"{where}: a Perfetto trace without tfprof GPU tracks; only tfprof's own "
            ".pftrace exports can be imported"
        )
    meta = {"otherData": {"tool": {"name": TOOL_NAME}, "origin_ns": origin}}
    return load_events(where, events, meta)
