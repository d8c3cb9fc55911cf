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
  both ends of each launch flow (``TimelinePart.starts`` / ``ends``: XProf draws its
  launch arrows from it, host plane out, device plane in, so it is written only where
  both ends are in the space: a 0 chained every kernel into one flow, and a one-ended id
  is a "flow consumer without producer" warning), ``context_id`` (left out when
  unknown), ``tf_op`` (the host range the record is attributed to, ``<node>:<type>``
  for TensorFlow ops, which XProf's framework_op_stats, op_profile and kernel_stats
  read), and ``kernel_details`` /
  ``memcpy_details`` / ``memset_details`` in the text forms XProf's kernel_stats parses;
  repeated strings are interned as stat metadata and referenced (``ref_value``);
- one ``/host:CPU`` plane with a line per host thread track (``thread:TID`` of each
  task): its CUDA API calls and its ranges (framework ops, NVTX, annotations) by name;
- times relative to the session start (the earliest event, ``Timeline.origin_ns``, kept
  as ``profile_start_time`` on the ``Task Environment`` plane): line ``timestamp_ns``
  plus event ``offset_ps``, so picosecond arithmetic stays far from int64's limit.

The space is written a part at a time as the wire bytes of ``XSpace``'s fields
(``protowire``), each line's events serialised a chunk at a time. A plane is one
message led by its length, and its lines' content may come from several parts (a track
continued across parts: a time range of its slices each), so every line's events are
spooled to one temporary file (``part_spool``) as parts come, and the planes are written at
the end, each line copied out in one piece: the GPU planes in the timeline's order
(numbered by GPU ordinal, or in that order when they come from more than one task),
then the ``/host:CPU`` plane, whose line ids and names depend on how many tasks have any
thread lines, the ``Task Environment`` plane and the host name. Between parts the
writer keeps each plane's interned metadata and each line's times and spool index.
"""

from __future__ import annotations

import re
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfprof.collector.export.output import BinaryOutput
from tfprof.collector.export.part_spool import Spool
from tfprof.collector.export.protowire import LEN, tag, varint
from tfprof.collector.export.xplane_lines import SpooledLine, gpu_plane_metadata, line_events
from tfprof.collector.export.xplane_wire import (
    LINE_ID,
    LINE_NAME,
    PLANE_LINE,
    PlaneMetadata,
    plane_field,
    string_field,
)
from tfprof.collector.timeline.build import SliceTrack, Timeline
from tfprof.collector.timeline.model import PartedTimeline, TimelinePart, parted
from tfprof.core.tracks import TrackKey, TrackKind
from tfprof.readers.tfprotos import xplane

GPU_PLANE_PREFIX = "/device:GPU:"
HOST_PLANE = "/host:CPU"
TASK_ENV_PLANE = "Task Environment"


CHUNK_EVENTS = 1 << 14  # events built as protobuf objects at once
_SPACE_HOSTNAME = tag(4, LEN)  # XSpace.hostnames


def run_name(origin_ns: int) -> str:
    """TensorFlow's profile run name: the session's UTC start, ``YYYY_MM_DD_HH_MM_SS``."""
    return time.strftime("%Y_%m_%d_%H_%M_%S", time.gmtime(origin_ns / 1e9))


def _safe_host(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name) or "localhost"


@dataclass
class _GpuPlane:
    """One (job, task, GPU)'s plane: its metadata and its stream lines by stream id."""

    task: tuple[str, str]
    ordinal: int
    meta: PlaneMetadata
    order: int  # its first stream track's place in the timeline (``SliceTrack.order``)
    lines: dict[int, SpooledLine] = field(default_factory=dict)


@dataclass
class _HostLine:
    """A host thread track's line (its id and name are known only at the end)."""

    thread: int
    track: str  # the track's name
    task: str  # /job:J/task:T
    order: int  # the track's place in the timeline (``SliceTrack.order``)
    line: SpooledLine = field(default_factory=SpooledLine)


@dataclass
class _SpaceState:
    """What rendering carries from part to part: per plane its metadata, per line its
    times and where its events lie in the spool. Planes and host lines are written in
    the timeline's order of tracks, whichever part first holds them."""

    host: PlaneMetadata  # the /host:CPU plane's metadata
    gpus: dict[tuple[str, str, int], _GpuPlane] = field(default_factory=dict)
    host_lines: dict[tuple[int, TrackKey], _HostLine] = field(default_factory=dict)


class XPlaneReporter:
    """Renders a ``Timeline`` (or a ``PartedTimeline``, a part at a time) as a serialised
    ``XSpace``."""

    format_name = "xplane"

    def __init__(
        self,
        timeline: Timeline | PartedTimeline,
        host: str | None = None,
        chunk_events: int = CHUNK_EVENTS,
    ) -> None:
        self.timeline = timeline
        self.chunk_events = max(1, chunk_events)
        hosts = parted(timeline).hosts  # a Timeline's are read from its metadata
        self.host = _safe_host(host or (hosts[0] if len(hosts) == 1 else socket.gethostname()))

    def output_file(self, path: Path) -> Path:
        """``path`` itself if it ends in ``.xplane.pb``, else the file in the logdir ``path``."""
        if path.name.lower().endswith(".xplane.pb"):
            return path
        run = run_name(self.timeline.origin_ns)
        return path / "plugins" / "profile" / run / f"{self.host}.xplane.pb"

    def render(self, outfile: BinaryOutput) -> None:
        timeline = parted(self.timeline)
        state = _SpaceState(PlaneMetadata(xplane().XPlane()))
        with Spool() as spool:
            for part in timeline.parts():
                self._spool_part(part, timeline, state, spool)
                del part  # its records are released before the next part is read
            planes = _numbered(sorted(state.gpus.values(), key=lambda p: p.order))
            for plane_id, plane in planes:
                heads = [
                    LINE_ID + varint(stream)
                    + string_field(LINE_NAME, f"Stream #{stream}({','.join(line.event_types())})")
                    for stream, line in sorted(plane.lines.items())
                ]  # fmt: skip
                lines = [line for _, line in sorted(plane.lines.items())]
                name = f"{GPU_PLANE_PREFIX}{plane_id}"
                _write_plane(outfile, plane_id, name, plane.meta, heads, lines, spool)
            plane_id = len(planes)
            if state.host_lines:
                host_lines = sorted(state.host_lines.values(), key=lambda h: h.order)
                heads = _host_line_heads(host_lines)
                lines = [h.line for h in host_lines]
                _write_plane(outfile, plane_id, HOST_PLANE, state.host, heads, lines, spool)
                plane_id += 1
        outfile.write(self._task_env(plane_id, timeline))
        outfile.write(string_field(_SPACE_HOSTNAME, self.host))

    def _spool_part(
        self, part: TimelinePart, timeline: PartedTimeline, state: _SpaceState, spool: Spool
    ) -> None:
        """The part's events of every line into the spool: its GPU stream lines (by
        plane, each plane's by stream id), then its host thread lines."""
        linked = _linked_slices(part)
        groups: dict[tuple[str, str, int], list[int]] = {}
        for index, track in enumerate(part.slices):
            key = track.key
            if key.kind is TrackKind.STREAM:  # memcpy tracks repeat copies: left out
                groups.setdefault((key.job, key.task, key.gpu), []).append(index)
        for group, indices in groups.items():
            plane = state.gpus.get(group)
            if plane is None:
                first = part.slices[indices[0]]
                meta = gpu_plane_metadata(first.key, timeline)
                plane = _GpuPlane(group[:2], group[2], meta, first.order)
                state.gpus[group] = plane
            plane.order = min([plane.order, *(part.slices[i].order for i in indices)])
            for index in sorted(indices, key=lambda i: part.slices[i].key.stream):
                track = part.slices[index]
                line = plane.lines.setdefault(track.key.stream, SpooledLine())
                self._spool_line(spool, plane.meta, line, track, linked.get(index), part.names)
        for index, track in enumerate(part.slices):
            key = track.key
            if key.kind is TrackKind.THREAD:
                host = state.host_lines.get((track.pid, key))
                if host is None:
                    host = _HostLine(key.thread, track.name, key.task_prefix, track.order)
                    state.host_lines[(track.pid, key)] = host
                line = host.line
                self._spool_line(spool, state.host, line, track, linked.get(index), part.names)

    def space(self) -> Any:
        """The whole ``XSpace`` as a protobuf message (tests; small timelines)."""
        from io import BytesIO

        out = BytesIO()
        self.render(out)
        space = xplane().XSpace()
        space.ParseFromString(out.getvalue())
        return space

    def _spool_line(
        self,
        spool: Spool,
        plane: PlaneMetadata,
        line: SpooledLine,
        track: SliceTrack,
        linked: set[int] | None,
        names: tuple[str, ...],
    ) -> None:
        """A part's share of a line: its times into ``line``, its events into ``spool``."""
        if len(track) == 0:
            return
        start = line.add(track)
        for chunk in line_events(plane, track, start, linked or set(), names, self.chunk_events):
            spool.write(line.events, chunk)

    def _task_env(self, plane_id: int, timeline: PartedTimeline) -> bytes:
        plane = PlaneMetadata(xplane().XPlane())
        origin = timeline.origin_ns
        plane.proto.stats.add(metadata_id=plane.stat_id("profile_start_time"), uint64_value=origin)
        plane.proto.stats.add(
            metadata_id=plane.stat_id("profile_stop_time"), uint64_value=origin + timeline.end_ns
        )
        return plane_field(plane_id, TASK_ENV_PLANE, plane.proto.SerializeToString())


def _numbered(planes: list[_GpuPlane]) -> list[tuple[int, _GpuPlane]]:
    """The GPU planes with their ids: their GPU ordinals when all come from one task,
    else their places in the timeline's order (ordinals repeat across tasks)."""
    if len({plane.task for plane in planes}) > 1:
        return list(enumerate(planes))
    return [(plane.ordinal, plane) for plane in planes]


def _host_line_heads(lines: list[_HostLine]) -> list[bytes]:
    """Each host line's id and name: its thread, or when several tasks have threads,
    its place (line ids must be unique in a plane; thread ids repeat across tasks) and
    the track's full name."""
    several = len({line.task for line in lines}) > 1
    heads = []
    for index, line in enumerate(lines):
        line_id = index if several else line.thread
        name = line.track if several else f"thread:{line.thread}"
        heads.append(LINE_ID + varint(line_id) + string_field(LINE_NAME, name))
    return heads


def _write_plane(
    outfile: BinaryOutput,
    plane_id: int,
    name: str,
    plane: PlaneMetadata,
    heads: list[bytes],
    lines: list[SpooledLine],
    spool: Spool,
) -> None:
    """A plane: its metadata, then each line's id and name, times and spooled events."""
    meta: bytes = plane.proto.SerializeToString()
    bodies = [head + line.head() for head, line in zip(heads, lines, strict=True)]
    sizes = [len(body) + line.events.size for body, line in zip(bodies, lines, strict=True)]
    size = len(meta) + sum(len(PLANE_LINE) + len(varint(n)) + n for n in sizes)
    outfile.write(plane_field(plane_id, name, size))
    outfile.write(meta)
    for body, line, n in zip(bodies, lines, sizes, strict=True):
        outfile.write(PLANE_LINE + varint(n) + body)
        spool.copy(line.events, outfile)


def _linked_slices(part: TimelinePart) -> dict[int, set[int]]:
    """Per track (by index in the part), its slices at either end of a launch flow."""
    out: dict[int, set[int]] = {}
    for marks in (part.starts, part.ends):
        for t, i in zip(marks.track.tolist(), marks.slice.tolist(), strict=True):
            out.setdefault(t, set()).add(i)
    return out
