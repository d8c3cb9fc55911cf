"""XPlane (``XSpace``): what TensorBoard's profile plugin and XProf open.

``write_timeline`` puts it where they look, ``<logdir>/plugins/profile/<run>/<host>.xplane.pb``
(``<run>`` a UTC timestamp as TensorFlow's profiler names runs), so
``tensorboard --logdir LOGDIR`` or ``xprof LOGDIR`` shows it; a path ending in
``.xplane.pb`` is written as that file.

Shaped like TensorFlow's CUPTI tracer output:

- one plane ``/device:GPU:<N>`` per GPU (per (job, task, GPU) when the timeline holds
  several jobs or tasks: planes are then numbered in timeline order, and each plane's
  ``tfprof_device`` stat names its ``/job:J/task:T/gpu:N``), with the device's
  capabilities as plane stats where known;
- a line per stream, id the CUDA stream id, named as TensorFlow names them,
  ``Stream #<id>(Kernel,MemcpyH2D,...)``; copies appear once, on their stream;
- events with interned event metadata (one per name) and stats: ``correlation_id`` on
  both ends of each launch flow (XProf draws its launch arrows from it, host plane
  out, device plane in, so it is written only where both ends are in the space: a 0
  chained every kernel into one flow, and a one-ended id is a "flow consumer without
  producer" warning), ``context_id`` (left out when unknown), ``tf_op`` (the host range
  the record is attributed to, ``<node>:<type>`` for TensorFlow ops, which XProf's
  framework_op_stats, op_profile and kernel_stats read), and ``kernel_details`` /
  ``memcpy_details`` / ``memset_details`` in the text forms XProf's kernel_stats parses;
  repeated strings are interned as stat metadata and referenced (``ref_value``)
  (``xplane_events``);
- one ``/host:CPU`` plane with a line per host thread track (``thread:TID`` of each
  task): its CUDA API calls and its ranges (framework ops, NVTX, annotations) by name;
- times relative to the session start (the earliest event, the timeline's origin, kept
  as ``profile_start_time`` on the ``Task Environment`` plane): line ``timestamp_ns``
  plus event ``offset_ps``, so picosecond arithmetic stays far from int64's limit.

A message is written with its length first, and a plane's metadata is complete only
once its last event was made; the timeline comes a time chunk at a time, each touching
many lines. So every line's events are serialised into one temporary file as their
chunks come (a line's pieces join into one ``XLine``), and the space is written at the
end, plane by plane and line by line, copied from that file: memory holds a chunk and
the planes' metadata.
"""

from __future__ import annotations

import re
import socket
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from tfprof.collector.export.output import SPOOL_BYTES, BinaryOutput, copy_spooled
from tfprof.collector.export.protowire import LEN, VARINT, tag, varint
from tfprof.collector.export.xplane_events import LineKinds, PlaneMetadata, line_events
from tfprof.collector.timeline.model import Timeline, TimelinePart, TrackPlace
from tfprof.core.tracks import TrackKind
from tfprof.readers.tfprotos import xplane

GPU_PLANE_PREFIX = "/device:GPU:"
HOST_PLANE = "/host:CPU"
TASK_ENV_PLANE = "Task Environment"
CHUNK_EVENTS = 1 << 14  # events built as protobuf objects at once
_SPACE_PLANE = tag(1, LEN)  # XSpace.planes
_SPACE_HOSTNAME = tag(4, LEN)  # XSpace.hostnames
_PLANE_ID, _PLANE_NAME, _PLANE_LINE = tag(1, VARINT), tag(2, LEN), tag(3, LEN)
_LINE_ID, _LINE_NAME = tag(1, VARINT), tag(2, LEN)


def _string(field_tag: bytes, text: str) -> bytes:
    data = text.encode()
    return field_tag + varint(len(data)) + data


def _plane(plane_id: int, name: str, size: int) -> bytes:
    """The head of an ``XSpace.planes`` field whose other fields (``size`` bytes) follow:
    its length, id and name."""
    head = _PLANE_ID + varint(plane_id) + _string(_PLANE_NAME, name)
    return _SPACE_PLANE + varint(len(head) + size) + head


def run_name(origin_ns: int) -> str:
    """TensorFlow's profile run name: the session's UTC start, ``YYYY_MM_DD_HH_MM_SS``."""
    return time.strftime("%Y_%m_%d_%H_%M_%S", time.gmtime(origin_ns / 1e9))


def _safe_host(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name) or "localhost"


@dataclass
class _Line:
    """A line's events in the spool (pieces: offset, size), and what it holds."""

    place: TrackPlace
    plane: int  # index into the space's planes; -1: the host plane
    pieces: list[tuple[int, int]] = field(default_factory=list)
    kinds: LineKinds = field(default_factory=LineKinds)

    @property
    def size(self) -> int:
        return sum(size for _, size in self.pieces)


@dataclass
class _GpuPlane:
    key: tuple[str, str, int]  # job, task, GPU ordinal
    meta: PlaneMetadata
    lines: list[int] = field(default_factory=list)  # layout track indices, by stream


class XPlaneReporter:
    """Renders a ``Timeline``, a part at a time, as a serialised ``XSpace``."""

    format_name = "xplane"

    def __init__(
        self, timeline: Timeline, host: str | None = None, chunk_events: int = CHUNK_EVENTS
    ) -> None:
        self.timeline = timeline
        self.chunk_events = max(1, chunk_events)
        hosts = timeline.hosts
        self.host = _safe_host(host or (hosts[0] if len(hosts) == 1 else socket.gethostname()))

    def output_file(self, path: Path) -> Path:
        """``path`` itself if it ends in ``.xplane.pb``, else the file in the logdir ``path``."""
        if path.name.lower().endswith(".xplane.pb"):
            return path
        run = run_name(self.timeline.origin_ns)
        return path / "plugins" / "profile" / run / f"{self.host}.xplane.pb"

    def render(self, outfile: BinaryOutput) -> None:
        timeline = self.timeline
        planes, lines = _planes(timeline)
        host = PlaneMetadata()
        with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as spool:
            for part in timeline.parts():
                self._spool(part, planes, lines, host, spool)
                del part  # its records go before the next part is read
            renumber = len({p.key[:2] for p in planes}) > 1
            for index, plane in enumerate(planes):
                number = index if renumber else plane.key[2]
                body = self._gpu_plane_meta(plane, timeline)
                heads = [(lines[t], _stream_head(lines[t])) for t in plane.lines]
                self._write_plane(outfile, number, f"{GPU_PLANE_PREFIX}{number}", body, heads,
                                  spool)  # fmt: skip
            count = len(planes)
            host_lines = [line for line in lines.values() if line.plane < 0]
            if host_lines:
                several = len({line.place.key.task_prefix for line in host_lines}) > 1
                heads = [(line, _thread_head(line, i, several)) for i, line in
                         enumerate(host_lines)]  # fmt: skip
                self._write_plane(outfile, count, HOST_PLANE, host.proto.SerializeToString(),
                                  heads, spool)  # fmt: skip
                count += 1
        outfile.write(self._task_env(count, timeline))
        outfile.write(_string(_SPACE_HOSTNAME, self.host))

    def _spool(self, part: TimelinePart, planes: list[_GpuPlane], lines: dict[int, _Line],
               host: PlaneMetadata, spool: IO[bytes]) -> None:  # fmt: skip
        """The part's events, appended to their lines in the spool."""
        linked = _linked_slices(part)
        for i, track in enumerate(part.slices):
            line = lines.get(track.track)
            if line is None:
                continue  # a memcpy track: its copies are on their streams
            meta = host if line.plane < 0 else planes[line.plane].meta
            line.kinds.add(track)
            for piece in line_events(meta, track, linked.get(i, set()), part.names,
                                     line.place.first_ns, self.chunk_events):  # fmt: skip
                spool.seek(0, 2)
                line.pieces.append((spool.tell(), len(piece)))
                spool.write(piece)

    def _gpu_plane_meta(self, plane: _GpuPlane, timeline: Timeline) -> bytes:
        """A GPU plane's stats and metadata (every event interned by now)."""
        job, task, gpu = plane.key
        meta = plane.meta
        stats = meta.proto.stats
        device = f"/job:{job}/task:{task}/gpu:{gpu}"
        stats.add(metadata_id=meta.stat_id("tfprof_device"), str_value=device)
        stats.add(metadata_id=meta.stat_id("device_vendor"), str_value="Nvidia")
        found = timeline.devices.get(job, {}).get(task, {}).get(str(gpu), {})
        major, _, minor = str(found.get("compute_capability", "0.0")).partition(".")
        for name, value in (
            ("compute_cap_major", int(major or 0)),
            ("compute_cap_minor", int(minor or 0)),
            ("core_count", int(found.get("sm_count", 0))),
            ("memory_size", int(found.get("memory_bytes", 0))),
        ):
            if value:
                stats.add(metadata_id=meta.stat_id(name), uint64_value=value)
        body: bytes = meta.proto.SerializeToString()
        return body

    def _write_plane(self, outfile: BinaryOutput, plane_id: int, name: str, meta: bytes,
                     lines: Sequence[tuple[_Line, bytes]], spool: IO[bytes]) -> None:  # fmt: skip
        """A plane: its metadata, then each line: its id and name, its times, its events
        copied from the spool."""
        heads = [head + _times(line.place) for line, head in lines]
        sizes = [len(h) + line.size for (line, _), h in zip(lines, heads, strict=True)]
        size = len(meta) + sum(len(_PLANE_LINE) + len(varint(s)) + s for s in sizes)
        outfile.write(_plane(plane_id, name, size))
        outfile.write(meta)
        for (line, _), head, line_size in zip(lines, heads, sizes, strict=True):
            outfile.write(_PLANE_LINE + varint(line_size) + head)
            for offset, piece in line.pieces:
                copy_spooled(spool, outfile, offset, piece)

    def _task_env(self, plane_id: int, timeline: Timeline) -> bytes:
        meta = PlaneMetadata()
        origin = timeline.origin_ns
        meta.proto.stats.add(metadata_id=meta.stat_id("profile_start_time"), uint64_value=origin)
        meta.proto.stats.add(
            metadata_id=meta.stat_id("profile_stop_time"), uint64_value=origin + timeline.end_ns
        )
        body: bytes = meta.proto.SerializeToString()
        return _plane(plane_id, TASK_ENV_PLANE, len(body)) + body

    def space(self) -> Any:
        """The whole ``XSpace`` as a protobuf message (tests; small timelines)."""
        from io import BytesIO

        out = BytesIO()
        self.render(out)
        space = xplane().XSpace()
        space.ParseFromString(out.getvalue())
        return space


def _planes(timeline: Timeline) -> tuple[list[_GpuPlane], dict[int, _Line]]:
    """The GPU planes (per job, task and GPU, in timeline order) with their stream lines,
    and every line (by layout track index), host threads' too."""
    planes: dict[tuple[str, str, int], _GpuPlane] = {}
    lines: dict[int, _Line] = {}
    for index, place in enumerate(timeline.layout.tracks):
        key = place.key
        if key.kind is TrackKind.STREAM:
            gpu = (key.job, key.task, key.gpu)
            if gpu not in planes:
                planes[gpu] = _GpuPlane(gpu, PlaneMetadata())
            planes[gpu].lines.append(index)
            lines[index] = _Line(place, list(planes).index(gpu))
        elif key.kind is TrackKind.THREAD:
            lines[index] = _Line(place, -1)
    for plane in planes.values():
        plane.lines.sort(key=lambda t: timeline.layout.tracks[t].key.stream)
    return list(planes.values()), lines


def _times(place: TrackPlace) -> bytes:
    """A line's ``timestamp_ns`` (its first event's start) and ``duration_ps``."""
    head = xplane().XLine(
        timestamp_ns=place.first_ns, duration_ps=(place.end_ns - place.first_ns) * 1000
    )
    data: bytes = head.SerializeToString()
    return data


def _stream_head(line: _Line) -> bytes:
    """A stream line's id (the CUDA stream id) and name (what it holds)."""
    stream = line.place.key.stream
    name = f"Stream #{stream}({','.join(line.kinds.types())})"
    return _LINE_ID + varint(stream) + _string(_LINE_NAME, name)


def _thread_head(line: _Line, index: int, several: bool) -> bytes:
    """A host line's id and name: line ids must be unique in a plane, and thread ids
    repeat across tasks."""
    thread = line.place.key.thread
    line_id = index if several else thread
    name = line.place.name if several else f"thread:{thread}"
    return _LINE_ID + varint(line_id) + _string(_LINE_NAME, name)


def _linked_slices(part: TimelinePart) -> dict[int, set[int]]:
    """Per slice track of the part (its index), the slices at either end of a flow."""
    out: dict[int, set[int]] = {}
    for marks in (part.starts, part.ends):
        for t, i in zip(marks.track.tolist(), marks.slice.tolist(), strict=True):
            out.setdefault(t, set()).add(i)
    return out
