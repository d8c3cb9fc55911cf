"""TensorFlow timelines (TF 1.x ``tf.timeline`` Chrome traces) into records.

Pseudo-processes are named by ``process_name`` metadata events; only those naming a
GPU-tracer device (``.../gpu:N/stream:M``, ``.../device:GPU:N/stream:M``,
``.../gpu:N/memcpy``) are read, and only their complete (``ph: "X"``) events. TF's GPU
tracer saves every kernel twice (on ``stream:all`` and on its own ``stream:M``) and every
copy twice (on its own ``stream:M`` and on ``memcpy``); the real files confirm it:
``stream:all`` holds exactly the per-stream kernels, and every ``memcpy`` event has a
twin (same ts, dur, args.name) on some stream. So:

- ``stream:all`` is skipped (pure duplicates);
- each per-stream event is imported once, as a **copy** when it has a twin on its
  GPU's ``memcpy`` track or is named ``MEMCPY*``, else as a **kernel**. The twin test
  matters: TF labels some copies with the op that issued them (a 1 µs "MatMul" on
  ``stream:7`` that also sits on ``memcpy`` and not on ``stream:all``), so the name
  alone would misfile them as kernels;
- a ``memcpy`` event without a twin is imported once, as a copy on stream 0 (the
  stream is unknown); in the known files there are none.

Copy kind comes from ``MEMCPY<kind>`` in the name or ``args.op`` (CUPTI's values;
unknown=0), bytes from a ``"<n> bytes"`` label if present. The record name is
``args.name`` (TF's node name, e.g. ``layer_1/fully_connected/MatMul`` or a copy's
``edge_..._recv`` edge), else ``args.op``, else the event name: TF 1.x records no CUDA
kernel names, and the node name is what its timeline shows per slice.

The host side: op events on the executor's device tracks (``.../cpu:0 Compute``,
``.../gpu:0 Compute``: where each op ran on the host, GPU ops included) become MARKER
records, category ``tf_op``, named ``<node>:<op type>`` as TensorFlow's own profiler
names op events. ``tf.timeline`` replaced thread ids by lanes, so each lane becomes a
thread numbered ``lane + 1`` (thread 0 means "no host thread"). Its ``DataFlow`` flow
events (``s`` then ``t``/``f``, one ``id``) link ops, not launches: they are counted
(complete flows and flow events without a partner) in ``flow_stats``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

from tfprof.core.cupti_labels import COPY_KINDS, MEMORY_KINDS
from tfprof.core.formats.trace import Event, TraceBuilder, event_args
from tfprof.core.records import RecordKind

_GPU_TRACK = re.compile(r"/(?:stream:(all|\d+)|memcpy)(?:\s|$)", re.IGNORECASE)
# The executor's op track of a device: "/job:localhost/replica:0/task:0/gpu:0 Compute".
_OP_TRACK = re.compile(r"/(?:device:)?(?:cpu|gpu):\d+ Compute$", re.IGNORECASE)
TF_OP_CATEGORY = "tf_op"
_FLOW_CATEGORY = "DataFlow"
_ORDINAL = re.compile(r"gpu:(\d+)", re.IGNORECASE)
_MEMCPY = re.compile(r"MEMCPY([A-Za-z]to[A-Za-z])")
_BYTES_LABEL = re.compile(r"(\d+) bytes")

_HTOD, _DTOH, _DTOD = (COPY_KINDS.parse(label) for label in ("HtoD", "DtoH", "DtoD"))
_DEVICE_MEMORY = MEMORY_KINDS.parse("device")


def process_names(events: Iterable[Event]) -> dict[Any, str]:
    """pid -> the name its ``process_name`` metadata event gives it."""
    names: dict[Any, str] = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            label = event_args(e).get("name")
            if isinstance(label, str):
                names[e.get("pid")] = label
    return names


def is_tf_timeline(events: list[Event]) -> bool:
    return any(_GPU_TRACK.search(name) for name in process_names(events).values())


def read_tf_timeline(events: list[Event], out: TraceBuilder) -> None:
    # pid -> (ordinal, stream or None for the memcpy track); stream:all is left out.
    tracks: dict[Any, tuple[int, int | None]] = {}
    for pid, label in process_names(events).items():
        m = _GPU_TRACK.search(label)
        if not m or m.group(1) == "all" or label.endswith(" Tensors"):
            continue
        ordinals = _ORDINAL.findall(label[: m.start()])
        tracks[pid] = (
            int(ordinals[-1]) if ordinals else 0,
            int(m.group(1)) if m.group(1) is not None else None,
        )

    on_streams: list[tuple[int, int, Event]] = []
    on_memcpy: list[tuple[int, Event]] = []
    for e in events:
        track = tracks.get(e.get("pid")) if e.get("ph") == "X" else None
        if track is None:
            continue
        ordinal, stream = track
        if stream is None:
            on_memcpy.append((ordinal, e))
        else:
            on_streams.append((ordinal, stream, e))

    unmatched = Counter(_twin_key(ordinal, e) for ordinal, e in on_memcpy)
    for ordinal, stream, e in on_streams:
        key = _twin_key(ordinal, e)
        is_copy = unmatched[key] > 0
        if is_copy:
            unmatched[key] -= 1
        if is_copy or str(e.get("name", "")).startswith("MEMCPY"):
            _add_copy(out, e, ordinal, stream)
        else:
            out.add(RecordKind.KERNEL, e, device=ordinal, stream=stream, name=_name(out, e))
    for ordinal, e in on_memcpy:  # copies with no twin on a stream track
        key = _twin_key(ordinal, e)
        if unmatched[key] > 0:
            unmatched[key] -= 1
            _add_copy(out, e, ordinal, 0)
    _read_host(events, out)


def _read_host(events: list[Event], out: TraceBuilder) -> None:
    """Op events of the executor's device tracks as MARKER records; dataflow counted."""
    op_pids = {
        pid
        for pid, label in process_names(events).items()
        if _OP_TRACK.search(label) and not _GPU_TRACK.search(label)
    }
    category = out.name(TF_OP_CATEGORY)
    starts: set[Any] = set()
    finishes: set[Any] = set()
    for e in events:
        ph = e.get("ph")
        if ph == "X" and e.get("pid") in op_pids:
            args = event_args(e)
            node = str(args.get("name") or e.get("name") or "")
            op = str(args.get("op") or "")
            lane = e.get("tid")
            out.add(
                RecordKind.MARKER,
                e,
                thread=(lane if isinstance(lane, int) and lane >= 0 else 0) + 1,
                name=out.name(f"{node}:{op}" if op else node),
                category=category,
            )
        elif ph in ("s", "t", "f") and e.get("cat") == _FLOW_CATEGORY:
            # tf.timeline reuses ids across steps: a flow is one (id, name) pair.
            key = (e.get("id"), e.get("name"))
            (starts if ph == "s" else finishes).add(key)
    if starts or finishes:
        out.flow_stats.update(
            dataflow_flows=len(starts & finishes),
            flow_starts_without_finish=len(starts - finishes),
            flow_finishes_without_start=len(finishes - starts),
        )


def _twin_key(ordinal: int, e: Event) -> tuple[Any, ...]:
    return (ordinal, e.get("ts"), e.get("dur"), event_args(e).get("name", e.get("name")))


def _name(out: TraceBuilder, e: Event) -> int:
    args = event_args(e)
    return out.name(str(args.get("name") or args.get("op") or e.get("name") or ""))


def _copy_kind(*labels: Any) -> int:
    for label in labels:
        if isinstance(label, str):
            m = _MEMCPY.search(label)
            if m:
                return COPY_KINDS.parse(m.group(1))
    return 0


def _bytes(args: dict[str, Any]) -> int:
    for value in args.values():
        if isinstance(value, str):
            m = _BYTES_LABEL.search(value)
            if m:
                return int(m.group(1))
    return 0


def _add_copy(out: TraceBuilder, e: Event, ordinal: int, stream: int) -> None:
    args = event_args(e)
    kind = _copy_kind(e.get("name"), args.get("op"))
    values = {"device": ordinal, "stream": stream, "name": _name(out, e), "copy_kind": kind,
              "bytes": _bytes(args)}  # fmt: skip
    if kind == _DTOD:  # both ends are device memory
        values.update(src_kind=_DEVICE_MEMORY, dst_kind=_DEVICE_MEMORY)
    elif kind == _HTOD:  # TF does not say pageable or pinned; only the GPU end
        values["dst_kind"] = _DEVICE_MEMORY
    elif kind == _DTOH:
        values["src_kind"] = _DEVICE_MEMORY
    out.add(RecordKind.MEMCPY, e, **values)
