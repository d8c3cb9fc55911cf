"""Read any trace file tfprof can import into columnar records (a ``RecordedTrace``).

JSON traces (TF timeline, Kineto, our Chrome export; gzip or not) go to the replay
importer, ``agent/sources/recorded.py``, which stays standard-library only because it
runs inside traced processes. The binary formats are read here, with the protobuf
classes of the packages that define them, and turned into the Chrome-style events that
importer already understands (``load_events``), so there is one parser per meaning:

- **Perfetto** (``.pftrace``): tfprof's own Perfetto export. Packets are read one at a
  time; interned names, categories and annotations are resolved; each begin/end pair
  on a lane becomes a complete event with its debug annotations as args, under the
  process and thread names of the track descriptors; the clock snapshot gives back the
  absolute start.
- **StepStats** (``.pb`` / ``.pbtxt``, a ``RunMetadata`` or a bare ``StepStats``): each
  GPU-tracer device (``/stream:`` or ``/memcpy`` in its name) becomes a process, each
  ``NodeExecStats`` an event named as ``tensorflow.python.client.timeline`` names it.
  Devices named like ours (``/job:J/task:T/gpu:N/stream:M``) are read as tfprof tracks,
  with the exact name from ``timeline_label``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

from google.protobuf import message, text_format

from tfprof.collector.export.stepstats import COLON_STANDIN
from tfprof.collector.tfprotos import step_stats
from tfprof.core.formats.recorded import (
    _TFPROF_TRACK,
    RecordedTrace,
    TraceFormatError,
    load_events,
    load_trace,
)

PERFETTO_SUFFIXES = (".pftrace", ".perfetto-trace", ".perfetto")
STEPSTATS_SUFFIXES = (".pb", ".pbtxt")
_TFPROF_META = {"tool": {"name": "tfprof-agent"}}
_THOUSAND = Decimal(1000)


def read_trace(path: str | os.PathLike[str]) -> RecordedTrace:
    """Import ``path`` whatever its format; ``TraceFormatError`` names what is wrong."""
    where = os.fspath(path)
    if Path(where).is_dir():
        raise TraceFormatError(f"{where}: a directory, not a trace file")
    with open(where, "rb") as f:
        head = f.read(64)
    name = where.lower()
    if name.endswith(PERFETTO_SUFFIXES):
        return read_perfetto(where)
    if name.endswith(STEPSTATS_SUFFIXES):
        return read_stepstats(where)
    if head[:2] == b"\x1f\x8b" or head.lstrip()[:1] in (b"{", b"["):
        return load_trace(where)
    if head[:1] == b"\x0a":  # field 1, length-delimited: a Trace's first packet
        return read_perfetto(where)
    raise TraceFormatError(
        f"{where}: not a trace tfprof can import (Chrome/TF timeline/Kineto JSON, "
        ".pftrace, RunMetadata/StepStats .pb/.pbtxt)"
    )


def _ns_to_us(ns: int) -> Decimal:
    return Decimal(ns) / _THOUSAND  # exact: load_events rounds µs back to the same ns


# -- Perfetto ------------------------------------------------------------------------


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
    """The serialised packets of a ``Trace`` (``repeated TracePacket packet = 1``)."""
    view = memoryview(data)
    pos = 0
    while pos < len(view):
        try:
            tag, pos = _varint(view, pos)
            if tag != 0x0A:
                raise TraceFormatError(f"{where}: not a Perfetto trace (field tag {tag:#x})")
            length, pos = _varint(view, pos)
        except IndexError:
            raise TraceFormatError(f"{where}: truncated Perfetto trace") from None
        if pos + length > len(view):
            raise TraceFormatError(f"{where}: truncated Perfetto trace")
        yield bytes(view[pos : pos + length])
        pos += length


def read_perfetto(where: str) -> RecordedTrace:
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pftrace

    data = Path(where).read_bytes()
    names: dict[int, str] = {}
    categories: dict[int, str] = {}
    annotation_names: dict[int, str] = {}
    strings: dict[int, str] = {}
    thread_of: dict[int, tuple[int, int]] = {}  # track uuid -> (pid, tid)
    events: list[dict[str, Any]] = []
    open_slices: dict[int, list[dict[str, Any]]] = {}
    origin = 0
    packet = pftrace.TracePacket()
    begin, end = pftrace.TrackEvent.TYPE_SLICE_BEGIN, pftrace.TrackEvent.TYPE_SLICE_END
    for raw in _packets(where, data):
        try:
            packet.ParseFromString(raw)
        except message.DecodeError as exc:
            raise TraceFormatError(f"{where}: corrupt Perfetto packet ({exc})") from None
        if packet.HasField("clock_snapshot"):
            clocks = {c.clock_id: c.timestamp for c in packet.clock_snapshot.clocks}
            if pftrace.BUILTIN_CLOCK_REALTIME in clocks:
                base = clocks.get(pftrace.BUILTIN_CLOCK_BOOTTIME, 0)
                origin = clocks[pftrace.BUILTIN_CLOCK_REALTIME] - base
        if packet.HasField("interned_data"):
            interned = packet.interned_data
            names.update((e.iid, e.name) for e in interned.event_names)
            categories.update((e.iid, e.name) for e in interned.event_categories)
            annotation_names.update((e.iid, e.name) for e in interned.debug_annotation_names)
            strings.update(
                (e.iid, e.str.decode("utf-8", "replace"))
                for e in interned.debug_annotation_string_values
            )
        if packet.HasField("track_descriptor"):
            desc = packet.track_descriptor
            if desc.HasField("process"):
                events.append(
                    _meta("process_name", desc.process.pid, None, desc.process.process_name)
                )
            elif desc.HasField("thread"):
                thread_of[desc.uuid] = (desc.thread.pid, desc.thread.tid)
                events.append(
                    _meta("thread_name", desc.thread.pid, desc.thread.tid, desc.thread.thread_name)
                )
        if not packet.HasField("track_event"):
            continue
        event = packet.track_event
        if event.type == begin and event.track_uuid in thread_of:
            pid, tid = thread_of[event.track_uuid]
            name = names.get(event.name_iid, "") if event.name_iid else event.name
            cats = [categories.get(i, "") for i in event.category_iids] or list(event.categories)
            args = {
                (annotation_names.get(a.name_iid, "") if a.name_iid else a.name): _value(a, strings)
                for a in event.debug_annotations
            }
            slice_event = {
                "ph": "X",
                "pid": pid,
                "tid": tid,
                "name": name,
                "cat": cats[0] if cats else "",
                "ts": packet.timestamp,
                "args": args,
            }
            open_slices.setdefault(event.track_uuid, []).append(slice_event)
        elif event.type == end and open_slices.get(event.track_uuid):
            slice_event = open_slices[event.track_uuid].pop()
            start = slice_event["ts"]
            slice_event["ts"] = _ns_to_us(start)
            slice_event["dur"] = _ns_to_us(packet.timestamp - start)
            events.append(slice_event)
    if not any(
        _TFPROF_TRACK.match(str(e["args"].get("name", ""))) for e in events if e["ph"] == "M"
    ):
        raise TraceFormatError(
            f"{where}: a Perfetto trace without tfprof GPU tracks; only tfprof's own "
            ".pftrace exports can be imported"
        )
    return load_events(where, events, {"otherData": {**_TFPROF_META, "origin_ns": origin}})


def _meta(kind: str, pid: int, tid: int | None, name: str) -> dict[str, Any]:
    event: dict[str, Any] = {"ph": "M", "name": kind, "pid": pid, "args": {"name": name}}
    if tid is not None:
        event["tid"] = tid
    return event


def _value(annotation: Any, strings: dict[int, str]) -> Any:
    which = annotation.WhichOneof("value")
    if which == "string_value_iid":
        return strings.get(annotation.string_value_iid, "")
    if which is None:
        return None
    return getattr(annotation, which)


# -- StepStats -----------------------------------------------------------------------

_KERNEL_LABEL = re.compile(r"@@(.*?)#")


def read_stepstats(where: str) -> RecordedTrace:
    config_pb2, stats_pb2 = step_stats()
    data = Path(where).read_bytes()
    stats = None
    if where.lower().endswith(".pbtxt"):
        text = data.decode("utf-8", "replace")
        for cls in (config_pb2.RunMetadata, stats_pb2.StepStats):
            try:
                parsed = text_format.Parse(text, cls())
            except text_format.ParseError:
                continue
            stats = parsed.step_stats if cls is config_pb2.RunMetadata else parsed
            break
    else:
        for cls in (config_pb2.RunMetadata, stats_pb2.StepStats):
            try:
                parsed = cls.FromString(data)
            except message.DecodeError:
                continue
            candidate = parsed.step_stats if cls is config_pb2.RunMetadata else parsed
            if candidate.dev_stats and all(d.device for d in candidate.dev_stats):
                stats = candidate
                break
    if stats is None:
        raise TraceFormatError(f"{where}: neither a RunMetadata nor a StepStats message")
    events: list[dict[str, Any]] = []
    ours = any(_TFPROF_TRACK.match(d.device) for d in stats.dev_stats)
    for pid, device in enumerate(stats.dev_stats, start=1):
        name = device.device
        if "/stream:" not in name and "/memcpy" not in name:
            continue  # CPU and framework devices hold no GPU activity
        events.append(_meta("process_name", pid, None, name if ours else f"{name} Compute"))
        for node in device.node_stats:
            events.append(_node_event(node, pid, ours))
    meta = {"otherData": dict(_TFPROF_META)} if ours else {}
    return load_events(where, events, meta)


def _node_event(node: Any, pid: int, ours: bool) -> dict[str, Any]:
    if node.all_start_nanos:
        start, duration = _ns_to_us(node.all_start_nanos), _ns_to_us(node.all_end_rel_nanos)
    else:
        start, duration = Decimal(node.all_start_micros), Decimal(node.all_end_rel_micros)
    # As tensorflow.python.client.timeline shows a GPU-tracer op: "name:op" from the
    # label's "@@...#" annotation, else from node_name.
    m = _KERNEL_LABEL.search(node.timeline_label)
    fields = [*(m.group(1) if m else node.node_name).split(":"), "unknown"]
    name, op = fields[0], fields[1]
    if ours:
        exact = node.timeline_label or name.replace(COLON_STANDIN, ":")
        cat = (
            "memcpy" if exact.startswith("MEMCPY") else "memset" if exact == "MEMSET" else "kernel"
        )
        args: dict[str, Any] = {"kind": exact[6:]} if cat == "memcpy" else {}
        return {"ph": "X", "pid": pid, "tid": 0, "ts": start, "dur": duration, "name": exact,
                "cat": cat, "args": args}  # fmt: skip
    return {"ph": "X", "pid": pid, "tid": node.thread_id, "ts": start, "dur": duration,
            "name": op, "cat": "Op", "args": {"name": name, "op": op}}  # fmt: skip
