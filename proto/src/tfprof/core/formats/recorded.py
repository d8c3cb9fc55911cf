"""Importers: read a recorded GPU trace file into columnar records for ``replay:``.

Imported inside the user's process (the replay source runs there), so standard library
only. ``load_trace`` sniffs gzip by its magic bytes and the format by content:

**TensorFlow timeline** (TF 1.x ``tf.timeline`` / Chrome trace). Pseudo-processes are
named by ``process_name`` metadata events; only those naming a GPU-tracer device
(``.../gpu:N/stream:M``, ``.../device:GPU:N/stream:M``, ``.../gpu:N/memcpy``) are read,
and only their complete (``ph: "X"``) events. TF's GPU tracer saves every kernel twice
(on ``stream:all`` and on its own ``stream:M``) and every copy twice (on its own
``stream:M`` and on ``memcpy``); the real files confirm it: ``stream:all`` holds exactly
the per-stream kernels, and every ``memcpy`` event has a twin (same ts, dur, args.name)
on some stream. So:

- ``stream:all`` is skipped (pure duplicates);
- each per-stream event is imported once, as a **copy** when it has a twin on its
  GPU's ``memcpy`` track or is named ``MEMCPY*``, else as a **kernel**. The twin test
  matters: TF labels some copies with the op that issued them (a 1 µs "MatMul" on
  ``stream:7`` that also sits on ``memcpy`` and not on ``stream:all``), so the name
  alone would misfile them as kernels;
- a ``memcpy`` event without a twin is imported once, as a copy on stream 0 (the
  stream is unknown); in the known files there are none.

Copy kind comes from ``MEMCPY<kind>`` in the name or ``args.op`` (HtoD=1, DtoH=2,
DtoD=8, ... CUPTI's values; unknown=0), bytes from a ``"<n> bytes"`` label if present.
The record name is ``args.name`` (TF's node name, e.g. ``layer_1/fully_connected/MatMul``
or a copy's ``edge_..._recv`` edge), else ``args.op``, else the event name: TF 1.x
records no CUDA kernel names, and the node name is what its timeline shows per slice.

**PyTorch Kineto** (``cat`` ``kernel`` / ``gpu_memcpy`` / ``gpu_memset``, and
``cuda_sync`` as SYNC records when it names a device; CPU-side cats are ignored).
Device, stream, context and correlation come from ``args`` (falling back to pid/tid);
kernels take grid, block, "registers per thread" and "shared memory" (Kineto prints
static + dynamic as one total; it goes to ``static_smem`` so the sum stays right);
copies parse kind and memory kinds from "Memcpy HtoD (Pageable -> Device)"; memsets take
the memory kind from "Memset (Device)" into ``src_kind`` (as ``RecordTable.add_memset``
does). ``bytes`` is ``args.bytes``, else bandwidth × duration. Device names come from
``deviceProperties``.

**tfprof's own Chrome export** (collector/export/chrome.py; ``otherData.tool.name`` is
"tfprof-agent", or ``otherData``/``metadata`` holds a ``tfprof`` key): tracks
``/job:J/task:T/gpu:N/stream:M`` and ``/job:J/task:T/gpu:N/memcpy``, as processes
(grouped by job) or as threads of a physical-GPU process (grouped by GPU). Copies sit on
both, so only stream tracks are read; ``cat`` says kernel / memcpy / memset / sync (``args.kind``
as a fallback), args use the Kineto-style names the exporter writes ("registers per
thread", "src kind", "memory kind", grid as "(x, y, z)" ...), enums as labels or numbers.
With several (job, task) pairs, each (job, task, gpu) becomes its own device ordinal.
Copy and memset names come back as the exporter's labels ("MEMCPYHtoD"), not the
original ones; every other column round-trips exactly.

Times: ``ts``/``dur`` are (possibly fractional) µs. JSON floats are parsed as
``Decimal`` so ns survive exactly at epoch magnitudes (a float64 of 1.7e15 µs only
resolves 0.25 µs), then rounded half-even to integer ns. Starts are made relative to
the earliest GPU event (which starts at 0) and records are sorted by start.
"""

from __future__ import annotations

import array
import gzip
import json
import os
import re
import zlib
from collections import Counter
from collections.abc import Iterable
from decimal import Decimal, InvalidOperation
from typing import Any

from tfprof.core.records import (
    COLUMN_INDEX,
    COLUMNS,
    SYNC_NO_STREAM,
    DeviceInfo,
    RecordKind,
    RecordTable,
)

FORMAT_TF_TIMELINE = "tf-timeline"
FORMAT_KINETO = "kineto"
FORMAT_TFPROF = "tfprof"

_GZIP_MAGIC = b"\x1f\x8b"
_KIND_LABEL = {
    RecordKind.KERNEL: "kernel",
    RecordKind.MEMCPY: "memcpy",
    RecordKind.MEMSET: "memset",
    RecordKind.SYNC: "sync",
}
_LABEL_KIND = {label: kind for kind, label in _KIND_LABEL.items()}
# CUpti_ActivitySynchronizationType, by Kineto's ``cuda_sync_kind`` and tfprof's labels.
SYNC_TYPES = {
    "unknown": 0,
    "event sync": 1, "eventsynchronize": 1,
    "stream wait event": 2, "streamwaitevent": 2,
    "stream sync": 3, "streamsynchronize": 3,
    "context sync": 4, "contextsynchronize": 4,
}  # fmt: skip

# CUpti_ActivityMemcpyKind / CUpti_ActivityMemoryKind (collector/model.py has the labels).
COPY_KINDS = {
    "htod": 1, "dtoh": 2, "htoa": 3, "atoh": 4, "atoa": 5,
    "atod": 6, "dtoa": 7, "dtod": 8, "htoh": 9, "ptop": 10,
}  # fmt: skip
MEMORY_KINDS = {
    "pageable": 1, "pinned": 2, "device": 3, "array": 4, "managed": 5,
    "device static": 6, "device_static": 6, "managed static": 7, "managed_static": 7,
}  # fmt: skip

_KINETO_CATS = {
    "kernel": RecordKind.KERNEL,
    "gpu_memcpy": RecordKind.MEMCPY,
    "gpu_memset": RecordKind.MEMSET,
    # Kineto before PyTorch 1.10 capitalised these.
    "memcpy": RecordKind.MEMCPY,
    "memset": RecordKind.MEMSET,
}
_TF_GPU_TRACK = re.compile(r"/(?:stream:(all|\d+)|memcpy)(?:\s|$)", re.IGNORECASE)
_TF_ORDINAL = re.compile(r"gpu:(\d+)", re.IGNORECASE)
_TF_MEMCPY = re.compile(r"MEMCPY([A-Za-z]to[A-Za-z])")
_BYTES_LABEL = re.compile(r"(\d+) bytes")
_DIM3_TEXT = re.compile(r"\d+")
_KINETO_MEMCPY = re.compile(r"Memcpy\s+(\w+)\s*\(([^)]*?)\s*->\s*([^)]*?)\)", re.IGNORECASE)
_KINETO_MEMSET = re.compile(r"Memset\s*\(([^)]*)\)", re.IGNORECASE)
_TFPROF_TRACK = re.compile(
    r"^/job:(?P<job>[^/]*)/task:(?P<task>[^/]*)/gpu:(?P<gpu>\d+)/"
    r"(?:stream:(?P<stream>\d+|none)|memcpy)"
)


class TraceFormatError(ValueError):
    """The file is not a trace we can import; the message is one line naming the file."""


class RecordedTrace:
    """GPU records of one trace file, columnar, sorted by start, first start at 0."""

    # A plain class, not a dataclass: dataclasses costs ~10 ms of import in the job.
    __slots__ = ("columns", "devices", "format", "names", "origin_ns", "path")

    def __init__(
        self,
        path: str,
        format: str,
        names: list[str],
        devices: list[DeviceInfo],
        columns: dict[str, array.array[int]],
        origin_ns: int = 0,
    ) -> None:
        self.path = path
        self.format = format  # FORMAT_TF_TIMELINE, FORMAT_KINETO or FORMAT_TFPROF
        self.names = names  # the trace's own string table; names[0] == "" (no name)
        self.devices = devices  # one per device ordinal that has records (no uuid)
        self.columns = columns  # every name in COLUMNS, int64, one value per record
        # The file's own time of start 0, in ns: the earliest GPU event as written
        # (epoch ns for TF and tfprof files, whatever clock Kineto used), so that imports
        # can keep each file's clock.
        self.origin_ns = origin_ns

    def __repr__(self) -> str:
        return f"RecordedTrace({self.path!r}, {self.format!r}, {len(self)} records)"

    def __len__(self) -> int:
        return len(self.columns["kind"])

    def column(self, name: str) -> array.array[int]:
        return self.columns[name]

    @property
    def span_ns(self) -> int:
        """From the first start (0) to the latest end."""
        starts, durs = self.columns["start_ns"], self.columns["duration_ns"]
        return max((s + d for s, d in zip(starts, durs, strict=True)), default=0)

    def per_stream_counts(self) -> dict[tuple[int, int], dict[str, int]]:
        counts: dict[tuple[int, int], dict[str, int]] = {}
        cols = self.columns
        for kind, device, stream in zip(cols["kind"], cols["device"], cols["stream"], strict=True):
            per = counts.setdefault((device, stream), {"kernel": 0, "memcpy": 0, "memset": 0})
            label = _KIND_LABEL[RecordKind(kind)]
            per[label] = per.get(label, 0) + 1  # "sync" only where there are syncs
        return counts

    def table(self, start: int = 0, stop: int | None = None) -> RecordTable:
        """Records [start:stop] as a RecordTable (names still index ``self.names``)."""
        return RecordTable([self.columns[name][start:stop] for name in COLUMNS])


def load_trace(path: str | os.PathLike[str]) -> RecordedTrace:
    """Import a TF timeline, Kineto or tfprof Chrome trace (optionally gzipped).

    Raises ``TraceFormatError`` for content we cannot import, ``OSError`` when the file
    cannot be read at all.
    """
    where = os.fspath(path)
    with open(where, "rb") as f:
        raw = f.read()
    if raw[:2] == _GZIP_MAGIC:
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceFormatError(f"{where}: corrupt gzip data ({exc})") from None
    try:
        doc = json.loads(raw, parse_float=Decimal)
    except json.JSONDecodeError as exc:
        raise TraceFormatError(
            f"{where}: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from None
    except UnicodeDecodeError:
        raise TraceFormatError(f"{where}: not JSON (not UTF-8 text)") from None

    events: Any
    meta: dict[str, Any] = {}
    if isinstance(doc, dict):
        if "traceEvents" not in doc:
            raise TraceFormatError(f"{where}: JSON without a traceEvents list, not a Chrome trace")
        events, meta = doc["traceEvents"], doc
    else:
        events = doc  # Chrome's bare-array form
    if not isinstance(events, list):
        raise TraceFormatError(f"{where}: traceEvents is a {type(events).__name__}, not a list")
    if not events:
        raise TraceFormatError(f"{where}: traceEvents is empty")
    return load_events(where, [e for e in events if isinstance(e, dict)], meta)


def load_events(
    where: str, events: list[dict[str, Any]], meta: dict[str, Any] | None = None
) -> RecordedTrace:
    """Import already-parsed Chrome trace events (``meta``: the top-level object).

    The collector's importers of binary formats (Perfetto, StepStats) turn their
    input into such events and come through here, so every format shares one parser.
    """
    meta = meta or {}
    builder = _Builder(where)
    fmt = _detect(meta, events)
    if fmt == FORMAT_TFPROF:
        _import_tfprof(events, builder)
    elif fmt == FORMAT_KINETO:
        _import_kineto(meta, events, builder)
    elif fmt == FORMAT_TF_TIMELINE:
        _import_tf_timeline(events, builder)
    if not builder.rows:
        what = f"{fmt} trace" if fmt else "trace"
        raise TraceFormatError(
            f"{where}: {what} has no GPU events (no kernel, memcpy or memset on a GPU stream);"
            " there is nothing to replay or analyse"
        )
    trace = builder.finish(fmt or "")
    extra = meta.get("otherData")
    if fmt == FORMAT_TFPROF and isinstance(extra, dict):
        origin = extra.get("origin_ns")  # our export's times are relative to it
        if isinstance(origin, int) and not isinstance(origin, bool):
            trace.origin_ns += origin
    return trace


def _detect(meta: dict[str, Any], events: list[dict[str, Any]]) -> str | None:
    for key in ("otherData", "metadata"):
        extra = meta.get(key)
        if isinstance(extra, dict):
            tool = extra.get("tool")
            if "tfprof" in extra or (isinstance(tool, dict) and tool.get("name") == "tfprof-agent"):
                return FORMAT_TFPROF
    for e in events:  # our track names, even without our metadata
        if e.get("ph") == "M" and _TFPROF_TRACK.match(str(_args(e).get("name", ""))):
            return FORMAT_TFPROF
    if any(str(e.get("cat", "")).lower() in _KINETO_CATS for e in events):
        return FORMAT_KINETO
    if any(_TF_GPU_TRACK.search(name) for name in _process_names(events).values()):
        return FORMAT_TF_TIMELINE
    return None


class _Builder:
    """Collects records as rows in COLUMNS order, then sorts and columnises them."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.rows: list[list[int]] = []
        self.names: dict[str, int] = {"": 0}
        self.devices: dict[int, DeviceInfo] = {}

    def name(self, name: str) -> int:
        return self.names.setdefault(name, len(self.names))

    def add(self, kind: RecordKind, event: dict[str, Any], **values: int) -> None:
        start = self.ns(event, "ts", required=True)
        row = [0] * len(COLUMNS)
        row[COLUMN_INDEX["kind"]] = int(kind)
        row[COLUMN_INDEX["start_ns"]] = start
        row[COLUMN_INDEX["duration_ns"]] = max(0, self.ns(event, "dur"))
        for key, value in values.items():
            row[COLUMN_INDEX[key]] = value
        self.rows.append(row)
        self.devices.setdefault(values["device"], {"ordinal": values["device"]})

    def ns(self, event: dict[str, Any], key: str, required: bool = False) -> int:
        value = event.get(key)
        if value is None and not required:
            return 0
        try:
            return _us_to_ns(value)
        except (TypeError, ValueError, InvalidOperation, OverflowError):
            raise TraceFormatError(
                f"{self.path}: event {event.get('name')!r} has a non-numeric {key}: {value!r}"
            ) from None

    def finish(self, fmt: str) -> RecordedTrace:
        rows = self.rows
        start_i = COLUMN_INDEX["start_ns"]
        rows.sort(key=lambda r: r[start_i])  # stable: ties keep file order
        origin = rows[0][start_i]
        columns: dict[str, array.array[int]] = {}
        for i, col_name in enumerate(COLUMNS):
            if i == start_i:
                columns[col_name] = array.array("q", [r[i] - origin for r in rows])
            else:
                columns[col_name] = array.array("q", [r[i] for r in rows])
        names = [""] * len(self.names)
        for text, index in self.names.items():
            names[index] = text
        devices = [self.devices[k] for k in sorted(self.devices)]
        return RecordedTrace(self.path, fmt, names, devices, columns, origin)


def _us_to_ns(value: Any) -> int:
    if isinstance(value, bool):
        raise TypeError("bool")
    if isinstance(value, int):
        return value * 1000
    if isinstance(value, Decimal):
        return int((value * 1000).to_integral_value())  # half-even, like round()
    if isinstance(value, float):
        return round(value * 1000)
    if isinstance(value, str):
        return _us_to_ns(Decimal(value))
    raise TypeError(type(value).__name__)


def _int(value: Any, default: int = 0) -> int:
    """A non-negative integer field from args, tolerating Decimal / str / junk."""
    if isinstance(value, bool) or value is None:
        return default
    try:
        number = int(value) if isinstance(value, int) else int(Decimal(str(value)))
    except (ValueError, InvalidOperation, OverflowError):
        return default
    return number if number >= 0 else default


def _dim3(value: Any) -> dict[str, int]:
    if isinstance(value, str):  # tfprof's export writes "(x, y, z)"
        value = _DIM3_TEXT.findall(value)
    if isinstance(value, (list, tuple)) and len(value) == 3:
        return {"x": _int(value[0]), "y": _int(value[1]), "z": _int(value[2])}
    return {"x": 0, "y": 0, "z": 0}


def _args(event: dict[str, Any]) -> dict[str, Any]:
    args = event.get("args")
    return args if isinstance(args, dict) else {}


def _process_names(events: Iterable[dict[str, Any]]) -> dict[Any, str]:
    names: dict[Any, str] = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            label = _args(e).get("name")
            if isinstance(label, str):
                names[e.get("pid")] = label
    return names


# -- TensorFlow timeline -------------------------------------------------------------


def _tf_copy_kind(*labels: Any) -> int:
    for label in labels:
        if isinstance(label, str):
            m = _TF_MEMCPY.search(label)
            if m:
                return COPY_KINDS.get(m.group(1).lower(), 0)
    return 0


def _tf_bytes(args: dict[str, Any]) -> int:
    for value in args.values():
        if isinstance(value, str):
            m = _BYTES_LABEL.search(value)
            if m:
                return int(m.group(1))
    return 0


def _import_tf_timeline(events: list[dict[str, Any]], out: _Builder) -> None:
    # pid -> (ordinal, stream or None for the memcpy track); stream:all is left out.
    tracks: dict[Any, tuple[int, int | None]] = {}
    for pid, label in _process_names(events).items():
        m = _TF_GPU_TRACK.search(label)
        if not m or m.group(1) == "all" or label.endswith(" Tensors"):
            continue
        ordinals = _TF_ORDINAL.findall(label[: m.start()])
        tracks[pid] = (
            int(ordinals[-1]) if ordinals else 0,
            int(m.group(1)) if m.group(1) is not None else None,
        )

    def twin_key(ordinal: int, e: dict[str, Any]) -> tuple[Any, ...]:
        args = _args(e)
        return (ordinal, e.get("ts"), e.get("dur"), args.get("name", e.get("name")))

    on_streams: list[tuple[int, int, dict[str, Any]]] = []
    on_memcpy: list[tuple[int, dict[str, Any]]] = []
    for e in events:
        track = tracks.get(e.get("pid")) if e.get("ph") == "X" else None
        if track is None:
            continue
        ordinal, stream = track
        if stream is None:
            on_memcpy.append((ordinal, e))
        else:
            on_streams.append((ordinal, stream, e))

    unmatched = Counter(twin_key(ordinal, e) for ordinal, e in on_memcpy)
    for ordinal, stream, e in on_streams:
        key = twin_key(ordinal, e)
        args = _args(e)
        label = args.get("name") or args.get("op") or e.get("name") or ""
        name = out.name(str(label))
        is_copy = unmatched[key] > 0
        if is_copy:
            unmatched[key] -= 1
        if is_copy or str(e.get("name", "")).startswith("MEMCPY"):
            kind = _tf_copy_kind(e.get("name"), args.get("op"))
            _tf_add_copy(out, e, ordinal, stream, name, kind, _tf_bytes(args))
        else:
            out.add(RecordKind.KERNEL, e, device=ordinal, stream=stream, name=name)
    for ordinal, e in on_memcpy:  # copies with no twin on a stream track
        key = twin_key(ordinal, e)
        if unmatched[key] > 0:
            unmatched[key] -= 1
            args = _args(e)
            label = args.get("name") or args.get("op") or e.get("name") or ""
            kind = _tf_copy_kind(e.get("name"), args.get("op"))
            _tf_add_copy(out, e, ordinal, 0, out.name(str(label)), kind, _tf_bytes(args))


def _tf_add_copy(
    out: _Builder, e: dict[str, Any], ordinal: int, stream: int, name: int, kind: int, nbytes: int
) -> None:
    host_side = {1: "src_kind", 2: "dst_kind"}.get(kind)
    values = {"device": ordinal, "stream": stream, "name": name, "copy_kind": kind, "bytes": nbytes}
    if kind == 8:  # DtoD: both ends are device memory
        values.update(src_kind=MEMORY_KINDS["device"], dst_kind=MEMORY_KINDS["device"])
    elif host_side is not None:  # TF does not say pageable or pinned; only the GPU end
        device_side = "dst_kind" if host_side == "src_kind" else "src_kind"
        values[device_side] = MEMORY_KINDS["device"]
    out.add(RecordKind.MEMCPY, e, **values)


# -- Kineto --------------------------------------------------------------------------


def _memory_kind(label: str) -> int:
    return MEMORY_KINDS.get(label.strip().lower(), 0)


def _import_kineto(meta: dict[str, Any], events: list[dict[str, Any]], out: _Builder) -> None:
    for e in events:
        if str(e.get("cat", "")).lower() == "cuda_sync":
            _kineto_sync(e, out)
            continue
        kind = _KINETO_CATS.get(str(e.get("cat", "")).lower())
        if kind is None or e.get("ph") != "X":
            continue
        args = _args(e)
        name = str(e.get("name", ""))
        values = {
            "device": _int(args.get("device"), _int(e.get("pid"))),
            "stream": _int(args.get("stream"), _int(e.get("tid"))),
            "context": _int(args.get("context")),
            "correlation": _int(args.get("correlation")),
            "name": out.name(name),
        }
        if kind == RecordKind.KERNEL:
            grid, block = _dim3(args.get("grid")), _dim3(args.get("block"))
            values.update(
                grid_x=grid["x"], grid_y=grid["y"], grid_z=grid["z"],
                block_x=block["x"], block_y=block["y"], block_z=block["z"],
                registers=_int(args.get("registers per thread")),
                static_smem=_int(args.get("static shared memory", args.get("shared memory"))),
                dynamic_smem=_int(args.get("dynamic shared memory")),
            )  # fmt: skip
        else:
            values["bytes"] = _kineto_bytes(args, out.ns(e, "dur"))
            if kind == RecordKind.MEMCPY:
                m = _KINETO_MEMCPY.search(name)
                if m:
                    values["copy_kind"] = COPY_KINDS.get(m.group(1).lower(), 0)
                    values["src_kind"] = _memory_kind(m.group(2))
                    values["dst_kind"] = _memory_kind(m.group(3))
            else:
                m = _KINETO_MEMSET.search(name)
                if m:
                    values["src_kind"] = _memory_kind(m.group(1))
        out.add(kind, e, **values)

    properties = meta.get("deviceProperties")
    for prop in properties if isinstance(properties, list) else []:
        if not isinstance(prop, dict):
            continue
        info = out.devices.get(_int(prop.get("id"), -1))
        if info is None:
            continue  # listed but idle in this trace
        if isinstance(prop.get("name"), str):
            info["name"] = prop["name"]
        for key, src in (
            ("compute_capability_major", "computeMajor"),
            ("compute_capability_minor", "computeMinor"),
            ("sm_count", "numSms"),
            ("memory_bytes", "totalGlobalMem"),
        ):
            if src in prop:
                info[key] = _int(prop[src])


def _kineto_sync(e: dict[str, Any], out: _Builder) -> None:
    """A ``cuda_sync`` event (Kineto's CUPTI SYNCHRONIZATION record) as a SYNC record.

    Only with a device in args: older Kineto wrote syncs without one. ``stream`` -1 (an
    event or context synchronisation) becomes CUPTI's invalid value, ``SYNC_NO_STREAM``.
    """
    args = _args(e)
    if e.get("ph") != "X" or _int(args.get("device"), -1) < 0:
        return
    raw_stream = args.get("stream")
    stream = SYNC_NO_STREAM if raw_stream in (None, -1) else _int(raw_stream, SYNC_NO_STREAM)
    label = str(args.get("cuda_sync_kind") or e.get("name") or "")
    out.add(
        RecordKind.SYNC,
        e,
        device=_int(args.get("device")),
        stream=stream,
        context=_int(args.get("context")),
        correlation=_int(args.get("correlation")),
        name=out.name(str(e.get("name", ""))),
        sync_type=SYNC_TYPES.get(label.strip().lower(), 0),
    )


def _kineto_bytes(args: dict[str, Any], dur_ns: int) -> int:
    if "bytes" in args:
        return _int(args["bytes"])
    try:
        gbps = Decimal(str(args.get("memory bandwidth (GB/s)")))
    except InvalidOperation:
        return 0
    if not gbps.is_finite() or gbps < 0:
        return 0
    return int((gbps * dur_ns).to_integral_value())  # 1 GB/s moves 1 byte per ns


# -- tfprof's own export -------------------------------------------------------------


def _tfprof_tracks(events: list[dict[str, Any]]) -> dict[tuple[Any, Any], re.Match[str]]:
    """(pid, tid) -> parsed track name, for slices on a stream track.

    Grouped by job, a track is a process (its lanes are threads); grouped by GPU, the
    process is the physical GPU and each track is a thread named after it (``... lane k``
    for extra lanes). Both are read; memcpy tracks only repeat the copies of stream tracks.
    """
    by_pid: dict[Any, re.Match[str]] = {}
    by_thread: dict[tuple[Any, Any], re.Match[str]] = {}
    for e in events:
        if e.get("ph") != "M" or e.get("name") not in ("process_name", "thread_name"):
            continue
        m = _TFPROF_TRACK.match(str(_args(e).get("name", "")))
        if m is None or m.group("stream") is None:
            continue
        if e["name"] == "process_name":
            by_pid[e.get("pid")] = m
        else:
            by_thread[(e.get("pid"), e.get("tid"))] = m
    tracks = dict(by_thread)
    for e in events:
        if e.get("ph") == "X" and e.get("pid") in by_pid:
            tracks.setdefault((e.get("pid"), e.get("tid")), by_pid[e.get("pid")])
    return tracks


def _import_tfprof(events: list[dict[str, Any]], out: _Builder) -> None:
    tracks = _tfprof_tracks(events)
    gpus = sorted({(m["job"], m["task"], int(m["gpu"])) for m in tracks.values()})
    if len({gpu[:2] for gpu in gpus}) > 1:
        # One process replays it: give each (job, task, gpu) an ordinal of its own.
        ordinals = {gpu: i for i, gpu in enumerate(gpus)}
    else:
        ordinals = {gpu: gpu[2] for gpu in gpus}
    for e in events:
        m = tracks.get((e.get("pid"), e.get("tid"))) if e.get("ph") == "X" else None
        if m is None:
            continue
        args = _args(e)
        kind = _LABEL_KIND.get(str(e.get("cat")))
        if kind is None:  # an older hand-written form put the kind in args
            kind = _LABEL_KIND.get(str(args.get("kind")))
        if kind is None:
            continue  # activity kinds this version does not replay

        values = {
            "device": ordinals[(m["job"], m["task"], int(m["gpu"]))],
            "stream": SYNC_NO_STREAM if m["stream"] == "none" else int(m["stream"]),
            "name": out.name(str(e.get("name", ""))),
            "context": _int(args.get("context")),
            "correlation": _int(args.get("correlation")),
        }
        if kind == RecordKind.KERNEL:
            grid, block = _dim3(args.get("grid")), _dim3(args.get("block"))
            values.update(
                grid_x=grid["x"], grid_y=grid["y"], grid_z=grid["z"],
                block_x=block["x"], block_y=block["y"], block_z=block["z"],
                registers=_int(_first(args, "registers per thread", "registers")),
                static_smem=_int(_first(args, "static shared memory", "static_smem")),
                dynamic_smem=_int(_first(args, "dynamic shared memory", "dynamic_smem")),
            )  # fmt: skip
        elif kind == RecordKind.MEMCPY:
            copy_kind = _first(args, "copy_kind", "kind")
            values.update(
                bytes=_int(args.get("bytes")),
                copy_kind=_named(copy_kind, COPY_KINDS),
                src_kind=_named(_first(args, "src kind", "src_kind"), MEMORY_KINDS),
                dst_kind=_named(_first(args, "dst kind", "dst_kind"), MEMORY_KINDS),
                dst_device=_int(_first(args, "dst device", "dst_device")),
            )
        elif kind == RecordKind.SYNC:
            values["sync_type"] = _named(_first(args, "sync type", "sync_type"), SYNC_TYPES)
        else:
            values.update(
                bytes=_int(args.get("bytes")),
                src_kind=_named(_first(args, "memory kind", "src_kind"), MEMORY_KINDS),
            )
        out.add(kind, e, **values)


def _first(args: dict[str, Any], *keys: str) -> Any:
    """The first of several spellings of one field (the exporter's, then the short one)."""
    return next((args[k] for k in keys if k in args), None)


def _named(value: Any, table: dict[str, int]) -> int:
    """An enum field written either as its number or as its label ("HtoD", "pinned")."""
    if isinstance(value, str) and value.strip().lower() in table:
        return table[value.strip().lower()]
    return _int(value)
