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
from itertools import compress
from typing import Any

from tfprof.core.cupti_labels import COPY_KINDS, MEMORY_KINDS
from tfprof.core.errors import TraceFormatError
from tfprof.core.records import RecordKind
from tfprof.readers.event_fields import event_args
from tfprof.readers.trace import Event, NotStreamable
from tfprof.readers.trace_builder import TraceBuilder

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

# What a pseudo-process is, by its name: (what, GPU ordinal, stream).
_STREAM, _COPIES, _OPS, _OTHER = range(4)
Track = tuple[int, int, int]  # stream -1 where there is none
_NOT_READ: Track = (_OTHER, 0, -1)


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
            return (_COPIES, ordinal, -1)
        return (_STREAM, ordinal, int(m.group(1)))
    return (_OPS, 0, -1) if _OP_TRACK.search(label) else _NOT_READ


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
        # Events on stream tracks, kernels unless told copies at the end: as records
        # (start, duration, ordinal, stream, label) flat, labels numbered in order of first
        # use; and what telling copies takes (ts, dur, event name, args), column by
        # column, not the events themselves (a million kept dicts cost the cycle
        # collector seconds); which are named MEMCPY*; the first bad time, if any.
        self._stream_records = array.array("q")
        self._gpu_labels: dict[str, int] = {}
        self._streams: tuple[list[Any], ...] = ([], [], [], [])
        self._named_copies: list[int] = []
        self._stream_error: TraceFormatError | None = None
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
        records, gpu_labels, named_copies = (
            self._stream_records.extend, self._gpu_labels, self._named_copies.append
        )  # fmt: skip
        stamps, durations, event_names, all_args = (c.append for c in self._streams)
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
                if what == _OTHER:
                    continue
                args = e.get("args")
                if type(args) is not dict:
                    args = args if isinstance(args, dict) else {}
                if what == _STREAM:
                    ts, dur, name = e.get("ts"), e.get("dur"), e.get("name")
                    label = args.get("name") or args.get("op") or name or ""
                    if type(label) is not str:
                        label = str(label)
                    index = gpu_labels.get(label)
                    if index is None:
                        index = gpu_labels[label] = len(gpu_labels)
                    if type(name) is str and name.startswith("MEMCPY"):
                        named_copies(len(self._streams[0]))
                    stamps(ts)
                    durations(dur)
                    event_names(name)
                    all_args(args)
                    if type(ts) is int and type(dur) is int:
                        records((ts * 1000, dur * 1000 if dur > 0 else 0, ordinal, stream, index))
                    else:
                        self._add_stream_event(e, ordinal, stream, index)
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

    def _add_stream_event(self, e: Event, ordinal: int, stream: int, index: int) -> None:
        try:
            start, duration = self.out.times(e)
        except TraceFormatError as exc:  # raised at the end, where the whole-file reader would
            self._stream_error = self._stream_error or exc
            start = duration = 0
        self._stream_records.extend((start, duration, ordinal, stream, index))

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
        if self._stream_error is not None:
            raise self._stream_error
        out = self.out
        numbers = [out.name(label) for label in self._gpu_labels]  # first use, as read
        copies = self._copies()
        records = self._stream_records
        width, count = 5, len(records) // 5
        copy_layout = out.layout(
            RecordKind.MEMCPY,
            "device", "stream", "name", "copy_kind", "bytes", "src_kind", "dst_kind",
        )  # fmt: skip
        kernels = out.layout(RecordKind.KERNEL, "device", "stream", "name")
        event_names, all_args = self._streams[2:]
        for i in copies:
            start, duration, ordinal, stream, index = records[i * width : (i + 1) * width]
            values = _copy_values(event_names[i], all_args[i])
            copy_layout.values.extend((start, duration, ordinal, stream, numbers[index], *values))
        kernel_columns = [records[c::width] for c in range(width)]
        kernel_columns[4] = array.array("q", map(numbers.__getitem__, kernel_columns[4]))
        if copies:
            is_kernel = bytearray([1]) * count
            for i in copies:
                is_kernel[i] = 0
            kernel_columns = [array.array("q", compress(c, is_kernel)) for c in kernel_columns]
        kernels.extend_columns(kernel_columns)
        order = bytearray([kernels.id]) * count
        for i in copies:
            order[i] = copy_layout.id
        out.order.frombytes(order)
        for ordinal in set(records[2::width]):
            out.add_device(ordinal)
        unmatched = self._unmatched
        for ordinal, e in self._on_memcpy:  # copies with no twin on a stream track
            key = _twin_key(ordinal, e)
            if unmatched[key] > 0:
                unmatched[key] -= 1
                _add_copy(out, e, ordinal, 0)
        self._add_ops()

    def _copies(self) -> list[int]:
        """Which stream events are copies, in order: named MEMCPY*, or the twin of an
        event on their GPU's memcpy track (each twin taken once, in file order)."""
        self._unmatched = unmatched = Counter(_twin_key(o, e) for o, e in self._on_memcpy)
        twin_stamps = {e.get("ts") for _, e in self._on_memcpy}
        if not twin_stamps:
            return self._named_copies
        stamps, durations, event_names, all_args = self._streams
        ordinals = self._stream_records[2::5]
        twins = []
        for i in [i for i, ts in enumerate(stamps) if ts in twin_stamps]:
            key = (ordinals[i], stamps[i], durations[i], all_args[i].get("name", event_names[i]))
            if unmatched[key] > 0:
                unmatched[key] -= 1
                twins.append(i)
        return sorted(set(twins).union(self._named_copies))

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


def _copy_values(event_name: Any, args: dict[str, Any]) -> tuple[int, int, int, int]:
    """(copy kind, bytes, source and destination memory kinds) of a copy."""
    kind = _copy_kind(event_name, args.get("op"))
    if kind == _DTOD:  # both ends are device memory
        return kind, _bytes(args), _DEVICE_MEMORY, _DEVICE_MEMORY
    if kind == _HTOD:  # TF does not say pageable or pinned; only the GPU end
        return kind, _bytes(args), 0, _DEVICE_MEMORY
    if kind == _DTOH:
        return kind, _bytes(args), _DEVICE_MEMORY, 0
    return kind, _bytes(args), 0, 0


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
