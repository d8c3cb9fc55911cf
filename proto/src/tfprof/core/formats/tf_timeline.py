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

import array
import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

from tfprof.core.cupti_labels import COPY_KINDS, MEMORY_KINDS
from tfprof.core.errors import TraceFormatError
from tfprof.core.formats.trace import Event, NotStreamable, TraceBuilder, event_args
from tfprof.core.records import RecordKind

_GPU_TRACK = re.compile(r"/(?:stream:(all|\d+)|memcpy)(?:\s|$)", re.IGNORECASE)
# The executor's op track of a device: "/job:localhost/replica:0/task:0/gpu:0 Compute".
_OP_TRACK = re.compile(r"/(?:device:)?(?:cpu|gpu):\d+ Compute$", re.IGNORECASE)
TF_OP_CATEGORY = "tf_op"
_FLOW_CATEGORY = "DataFlow"
_FLOW_PHASES = ("s", "t", "f")
_ORDINAL = re.compile(r"gpu:(\d+)", re.IGNORECASE)
_MEMCPY = re.compile(r"MEMCPY([A-Za-z]to[A-Za-z])")
_BYTES_LABEL = re.compile(r"(\d+) bytes")

_HTOD, _DTOH, _DTOD = (COPY_KINDS.parse(label) for label in ("HtoD", "DtoH", "DtoD"))
_DEVICE_MEMORY = MEMORY_KINDS.parse("device")

# What a pseudo-process is, by its name: (what, GPU ordinal, stream or None for memcpy).
_STREAM, _COPIES, _OPS, _OTHER = range(4)
Track = tuple[int, int, int | None]
_NOT_READ: Track = (_OTHER, 0, None)


def process_names(events: Iterable[Event]) -> dict[Any, str]:
    """pid -> the name its ``process_name`` metadata event gives it."""
    names: dict[Any, str] = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            label = event_args(e).get("name")
            if isinstance(label, str):
                names[e.get("pid")] = label
    return names


def is_tf_timeline(events: Iterable[Event]) -> bool:
    return any(_GPU_TRACK.search(name) for name in process_names(events).values())


def read_tf_timeline(events: list[Event], out: TraceBuilder) -> None:
    reader = TfTimelineReader(out, process_names(events))
    reader.feed(events)
    reader.finish()


def track_of(label: str) -> Track:
    """What events on a process of this name are: GPU stream or memcpy, ops, or neither.

    ``stream:all`` (pure duplicates) and the `` Tensors`` companions are not read.
    """
    m = _GPU_TRACK.search(label)
    if m:
        if m.group(1) == "all" or label.endswith(" Tensors"):
            return _NOT_READ
        ordinals = _ORDINAL.findall(label[: m.start()])
        ordinal = int(ordinals[-1]) if ordinals else 0
        if m.group(1) is None:
            return (_COPIES, ordinal, None)
        return (_STREAM, ordinal, int(m.group(1)))
    return (_OPS, 0, None) if _OP_TRACK.search(label) else _NOT_READ


class TfTimelineReader:
    """Reads a TF timeline's events a chunk at a time.

    With ``labels`` (pid -> process name, from the whole file) events are read by them;
    without, the ``process_name`` events met so far name the processes, as tf.timeline
    writes them first. A name that would change how events already read are read (a
    process named after its events, or renamed) raises ``NotStreamable``: the caller then
    reads the whole file with its names known. GPU activity becomes records at
    ``finish`` (copies are told from kernels by their twins on the memcpy track, which
    may come later), then the op ranges, as a reader of the whole file adds them.
    """

    def __init__(self, out: TraceBuilder, labels: dict[Any, str] | None = None) -> None:
        self.out = out
        self._learning = labels is None
        self._labels: dict[Any, str] = dict(labels or {})
        self._tracks = {pid: track_of(label) for pid, label in self._labels.items()}
        # Events on stream tracks, column by column: (ordinal, stream, ts, dur, name, args).
        # Not the events themselves: a million kept dicts cost the cycle collector seconds.
        self._streams: tuple[list[Any], ...] = ([], [], [], [], [], [])
        self._on_memcpy: list[tuple[int, Event]] = []
        # Op ranges, made records after the GPU activity, as a reader of the whole file
        # does: (start, duration, thread, label) flat, labels ("<node>:<op>") numbered
        # in order of first use, and the first time that could not be read, if any.
        self._ops = array.array("q")
        self._op_labels: dict[str, int] = {}
        self._op_error: TraceFormatError | None = None
        self._flow_starts: set[Any] = set()
        self._flow_finishes: set[Any] = set()
        self.metadata: list[Event] = []  # ``ph: "M"`` events, for format detection
        self.any_kineto = False  # whether a Kineto GPU category was met (see events.py)
        self._unnamed: set[Any] = set()  # pids of complete events met before their name
        self._read_any = False

    def feed(self, events: Iterable[Event]) -> None:
        tracks, on_memcpy, ops = self._tracks, self._on_memcpy, self._ops.extend
        op_labels = self._op_labels
        ordinals, streams, stamps, durations, event_names, all_args = (
            c.append for c in self._streams
        )
        read_any = self._read_any
        for e in events:
            ph = e.get("ph")
            if ph == "X":
                pid = e.get("pid")
                track = tracks.get(pid)
                if track is None:
                    if self._learning:
                        self._unnamed.add(pid)
                    continue
                read_any = True
                what, ordinal, stream = track
                args = e.get("args")
                if type(args) is not dict:
                    args = args if isinstance(args, dict) else {}
                if what == _STREAM:
                    ordinals(ordinal)
                    streams(stream)
                    stamps(e.get("ts"))
                    durations(e.get("dur"))
                    event_names(e.get("name"))
                    all_args(args)
                elif what == _OPS:
                    node = args.get("name") or e.get("name") or ""
                    op = args.get("op") or ""
                    label = f"{node}:{op}" if op else str(node)
                    index = op_labels.get(label)
                    if index is None:
                        index = op_labels[label] = len(op_labels)
                    lane = e.get("tid")
                    thread = (lane if isinstance(lane, int) and lane >= 0 else 0) + 1
                    ts, dur = e.get("ts"), e.get("dur")
                    if type(ts) is int and type(dur) is int:
                        ops((ts * 1000, dur * 1000 if dur > 0 else 0, thread, index))
                    else:
                        self._add_op(e, thread, index)
                elif what == _COPIES:
                    on_memcpy.append((ordinal, e))
            elif ph in _FLOW_PHASES:
                if e.get("cat") == _FLOW_CATEGORY:
                    # tf.timeline reuses ids across steps: a flow is one (id, name) pair.
                    key = (e.get("id"), e.get("name"))
                    (self._flow_starts if ph == "s" else self._flow_finishes).add(key)
            elif ph == "M":
                self.metadata.append(e)
                if self._learning and e.get("name") == "process_name":
                    self._name(e, read_any)
        self._read_any = read_any

    def _add_op(self, e: Event, thread: int, index: int) -> None:
        try:
            start, duration = self.out.times(e)
        except TraceFormatError as exc:  # raised at the end, where the whole-file reader would
            self._op_error = self._op_error or exc
            return
        self._ops.extend((start, duration, thread, index))

    def _name(self, e: Event, read_any: bool) -> None:
        label = event_args(e).get("name")
        if not isinstance(label, str):
            return
        pid = e.get("pid")
        known = self._labels.get(pid)
        if known == label:
            return
        if pid in self._unnamed or (known is not None and read_any):
            raise NotStreamable(f"process {pid!r} named after its events")
        self._labels[pid] = label
        self._tracks[pid] = track_of(label)

    @property
    def labels(self) -> dict[Any, str]:
        return self._labels

    def finish(self) -> None:
        out = self.out
        unmatched = Counter(_twin_key(ordinal, e) for ordinal, e in self._on_memcpy)
        twins_left = len(self._on_memcpy)
        twin_stamps = {e.get("ts") for _, e in self._on_memcpy}
        kernels = out.layout(RecordKind.KERNEL, "device", "stream", "name")
        add, order, names = kernels.values.extend, out.order.append, out.names
        for ordinal, stream, ts, dur, event_name, args in zip(*self._streams, strict=True):
            is_copy = False
            if twins_left and ts in twin_stamps:
                key = (ordinal, ts, dur, args.get("name", event_name))
                is_copy = unmatched[key] > 0
                if is_copy:
                    unmatched[key] -= 1
                    twins_left -= 1
            if is_copy or str(event_name or "").startswith("MEMCPY"):
                event = {"name": event_name, "ts": ts, "dur": dur, "args": args}
                _add_copy(out, event, ordinal, stream)
                continue
            if type(ts) is int and type(dur) is int:
                start, duration = ts * 1000, dur * 1000 if dur > 0 else 0
            else:
                start, duration = out.times({"name": event_name, "ts": ts, "dur": dur})
            label = args.get("name") or args.get("op") or event_name or ""
            if type(label) is not str:
                label = str(label)
            index = names.get(label)
            if index is None:
                index = names[label] = len(names)
            add((start, duration, ordinal, stream, index))
            order(kernels.id)
            out.add_device(ordinal)
        for ordinal, e in self._on_memcpy:  # copies with no twin on a stream track
            key = _twin_key(ordinal, e)
            if unmatched[key] > 0:
                unmatched[key] -= 1
                _add_copy(out, e, ordinal, 0)
        self._add_ops()

    def _add_ops(self) -> None:
        """Op events of the executor's device tracks as MARKER records; dataflow counted."""
        out = self.out
        category = out.name(TF_OP_CATEGORY)
        numbers = [out.name(label) for label in self._op_labels]
        if self._op_error is not None:
            raise self._op_error
        ops = self._ops
        markers = out.layout(RecordKind.MARKER, "thread", "name", "category")
        count = markers.extend_columns(
            [
                ops[0::4],
                ops[1::4],
                ops[2::4],
                array.array("q", map(numbers.__getitem__, ops[3::4])),
                array.array("q", [category]) * (len(ops) // 4),
            ]
        )
        out.order.frombytes(bytes([markers.id]) * count)
        starts, finishes = self._flow_starts, self._flow_finishes
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
            kind = _COPY_KIND_OF.get(label)
            if kind is None:
                m = _MEMCPY.search(label)
                kind = COPY_KINDS.parse(m.group(1)) if m else -1
                if len(_COPY_KIND_OF) < 65536:
                    _COPY_KIND_OF[label] = kind
            if kind >= 0:
                return kind
    return 0


_COPY_KIND_OF: dict[str, int] = {}  # label -> its copy kind, -1 when it names none


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
