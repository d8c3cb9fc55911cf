"""TensorFlow ``RunMetadata`` / ``StepStats`` files (``.pb`` binary, ``.pbtxt`` text) into records.

Each GPU-tracer device (``/stream:`` or ``/memcpy`` in its name) becomes a process,
each ``NodeExecStats`` an event named as ``tensorflow.python.client.timeline`` names it,
and the events go through the TF timeline reader. Devices named like ours
(``/job:J/task:T/gpu:N/stream:M``, the collector's StepStats export) are read as tfprof
tracks instead, with the exact name from ``timeline_label``. The protobuf classes come
from TensorBoard or TensorFlow (``tfprotos``), imported only when a file is read.
"""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path
from typing import Any

from tfprof.core.errors import TraceFormatError
from tfprof.core.records import RecordKind
from tfprof.core.slice_args import CATEGORIES
from tfprof.readers.event_fields import metadata_event, ns_to_us
from tfprof.readers.events import load_events
from tfprof.readers.tfprof_chrome import TOOL_NAME, gpu_track
from tfprof.readers.tfprotos import step_stats
from tfprof.readers.trace import Event, RecordedTrace

STEPSTATS_SUFFIXES = (".pb", ".pbtxt")
# Our StepStats export writes node names as "<name>:<name>" (TF's timeline shows the
# first two ":" fields); a ":" inside a name is written as this look-alike (U+2236).
COLON_STANDIN = "\u2236"
_GPU_DEVICE_MARKS = ("/stream:", "/memcpy")  # how timeline.py tells GPU-tracer devices
_KERNEL_LABEL = re.compile(r"@@(.*?)#")
_MEMCPY, _MEMSET = "MEMCPY", "MEMSET"


def read_stepstats(where: str) -> RecordedTrace:
    stats = _parse(where, Path(where).read_bytes())
    events: list[Event] = []
    ours = any(gpu_track(d.device) for d in stats.dev_stats)
    for pid, device in enumerate(stats.dev_stats, start=1):
        name = device.device
        if not any(mark in name for mark in _GPU_DEVICE_MARKS):
            continue  # CPU and framework devices hold no GPU activity
        events.append(metadata_event("process_name", pid, name if ours else f"{name} Compute"))
        for node in device.node_stats:
            events.append(_node_event(node, pid, ours))
    meta = {"otherData": {"tool": {"name": TOOL_NAME}}} if ours else {}
    return load_events(where, events, meta)


def _parse(where: str, data: bytes) -> Any:
    """The ``StepStats`` of a ``RunMetadata`` or of a bare ``StepStats``, binary or text."""
    config_pb2, stats_pb2 = step_stats()
    from google.protobuf import message, text_format  # the runtime of those classes

    if where.lower().endswith(".pbtxt"):
        text = data.decode("utf-8", "replace")
        for cls in (config_pb2.RunMetadata, stats_pb2.StepStats):
            try:
                parsed = text_format.Parse(text, cls())
            except text_format.ParseError:
                continue
            return parsed.step_stats if cls is config_pb2.RunMetadata else parsed
    else:
        for cls in (config_pb2.RunMetadata, stats_pb2.StepStats):
            try:
                parsed = cls.FromString(data)
            except message.DecodeError:
                continue
            candidate = parsed.step_stats if cls is config_pb2.RunMetadata else parsed
            if candidate.dev_stats and all(d.device for d in candidate.dev_stats):
                return candidate
    raise TraceFormatError(f"{where}: neither a RunMetadata nor a StepStats message")


def _node_event(node: Any, pid: int, ours: bool) -> Event:
    if node.all_start_nanos:
        start, duration = ns_to_us(node.all_start_nanos), ns_to_us(node.all_end_rel_nanos)
    else:
        start, duration = Decimal(node.all_start_micros), Decimal(node.all_end_rel_micros)
    # As tensorflow.python.client.timeline shows a GPU-tracer op: "name:op" from the
    # label's "@@...#" annotation, else from node_name.
    m = _KERNEL_LABEL.search(node.timeline_label)
    fields = [*(m.group(1) if m else node.node_name).split(":"), "unknown"]
    name, op = fields[0], fields[1]
    if not ours:
        return {"ph": "X", "pid": pid, "tid": node.thread_id, "ts": start, "dur": duration,
                "name": op, "cat": "Op", "args": {"name": name, "op": op}}  # fmt: skip
    # Our export: the exact name is the label; copies and memsets are named as in the
    # Chrome export ("MEMCPY<kind>", "MEMSET"), the only place their kind survives.
    exact = node.timeline_label or name.replace(COLON_STANDIN, ":")
    args: dict[str, Any] = {}
    if exact.startswith(_MEMCPY):
        kind = RecordKind.MEMCPY
        args["kind"] = exact.removeprefix(_MEMCPY)
    else:
        kind = RecordKind.MEMSET if exact == _MEMSET else RecordKind.KERNEL
    return {"ph": "X", "pid": pid, "tid": 0, "ts": start, "dur": duration, "name": exact,
            "cat": CATEGORIES[kind], "args": args}  # fmt: skip
