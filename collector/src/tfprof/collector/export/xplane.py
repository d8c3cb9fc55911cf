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
  both ends of each launch flow (``Timeline.flows``: XProf draws its launch arrows from
  it, host plane out, device plane in, so it is written only where both ends are in the
  space: a 0 chained every kernel into one flow, and a one-ended id is a "flow consumer
  without producer" warning), ``context_id`` (left out when unknown), ``tf_op`` (the host range the
  record is attributed to, ``<node>:<type>`` for TensorFlow ops, which XProf's
  framework_op_stats, op_profile and kernel_stats read), and ``kernel_details`` /
  ``memcpy_details`` / ``memset_details`` in the text forms XProf's kernel_stats parses;
  repeated strings are interned as stat metadata and referenced (``ref_value``);
- one ``/host:CPU`` plane with a line per host thread track (``thread:TID`` of each
  task): its CUDA API calls and its ranges (framework ops, NVTX, annotations) by name;
- times relative to the session start (the earliest event, ``Timeline.origin_ns``, kept
  as ``profile_start_time`` on the ``Task Environment`` plane): line ``timestamp_ns``
  plus event ``offset_ps``, so picosecond arithmetic stays far from int64's limit.

The space is written a part (task) at a time as the wire bytes of ``XSpace``'s fields
(``protowire``): each GPU plane once its task is merged, its lines' events serialised a
chunk at a time. Two things are only known later: whether planes are renumbered (more
than one task with GPU activity: the first task's planes wait for the second), and
the ``/host:CPU`` plane, which gathers every task's thread lines (their line ids and
names depend on how many tasks have any): its lines are spooled to a temporary file
and the plane is written at the end, with the ``Task Environment`` plane and the host
name.
"""

from __future__ import annotations

import re
import socket
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from tfprof.collector.export.output import BinaryOutput
from tfprof.collector.export.protowire import LEN, tag, varint
from tfprof.collector.export.xplane_lines import gpu_plane_fields, line_fields
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
from tfprof.core.tracks import TrackKind
from tfprof.readers.tfprotos import xplane

GPU_PLANE_PREFIX = "/device:GPU:"
HOST_PLANE = "/host:CPU"
TASK_ENV_PLANE = "Task Environment"


CHUNK_EVENTS = 1 << 14  # events built as protobuf objects at once
SPOOL_BYTES = 64 << 20  # host lines kept in memory up to this, then in a temporary file
_SPACE_HOSTNAME = tag(4, LEN)  # XSpace.hostnames


def run_name(origin_ns: int) -> str:
    """TensorFlow's profile run name: the session's UTC start, ``YYYY_MM_DD_HH_MM_SS``."""
    return time.strftime("%Y_%m_%d_%H_%M_%S", time.gmtime(origin_ns / 1e9))


def _safe_host(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name) or "localhost"


@dataclass(frozen=True)
class _HostLine:
    """A host thread line spooled without its id and name (known only at the end)."""

    thread: int
    track: str  # the track's name
    task: str  # /job:J/task:T
    size: int  # bytes in the spool


@dataclass
class _SpaceState:
    """What rendering carries from part to part.

    Planes are numbered by GPU ordinal unless GPU planes come from more than one
    (job, task): the first task's planes wait (``waiting``: ordinal, plane fields) until
    another task's come (then every plane is numbered in order) or the end."""

    host: PlaneMetadata  # the /host:CPU plane's metadata, its lines spooled
    planes: int = 0  # planes written so far
    waiting: list[tuple[int, bytes]] = field(default_factory=list)
    first_task: tuple[str, str] | None = None
    renumber: bool = False
    host_lines: list[_HostLine] = field(default_factory=list)  # spooled, in timeline order


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
        with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as spool:
            for part in timeline.parts():
                self._write_part(outfile, part, timeline, state, spool)
                del part  # its records are released before the next part is read
            for ordinal, body in state.waiting:
                outfile.write(plane_field(ordinal, f"{GPU_PLANE_PREFIX}{ordinal}", body))
                state.planes += 1
            if state.host_lines:
                self._write_host_plane(outfile, state.planes, state.host, state.host_lines, spool)
                state.planes += 1
        outfile.write(self._task_env(state.planes, timeline))
        outfile.write(string_field(_SPACE_HOSTNAME, self.host))

    def _write_part(
        self,
        outfile: BinaryOutput,
        part: TimelinePart,
        timeline: PartedTimeline,
        state: _SpaceState,
        spool: IO[bytes],
    ) -> None:
        """The part's GPU planes (or held back: see ``_SpaceState``); its host lines into
        the spool."""
        linked = _linked_slices(part)
        for task, ordinal, tracks in _gpu_groups(part):
            body = gpu_plane_fields(tracks, linked, timeline, part.names, self.chunk_events)
            state.first_task = state.first_task or task
            if not state.renumber and task == state.first_task:
                state.waiting.append((ordinal, body))
                continue
            state.renumber = True
            for _, held in state.waiting:
                outfile.write(plane_field(state.planes, f"{GPU_PLANE_PREFIX}{state.planes}", held))
                state.planes += 1
            state.waiting = []
            outfile.write(plane_field(state.planes, f"{GPU_PLANE_PREFIX}{state.planes}", body))
            state.planes += 1
        for track in part.slices:
            if track.key.kind is TrackKind.THREAD:
                size = self._spool_line(spool, state.host, track, linked, part.names)
                key = track.key
                state.host_lines.append(_HostLine(key.thread, track.name, key.task_prefix, size))

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
        spool: IO[bytes],
        plane: PlaneMetadata,
        track: SliceTrack,
        linked: dict[int, set[int]],
        names: tuple[str, ...],
    ) -> int:
        """A host thread line without its id and name, into ``spool``; its size."""
        size = 0
        for chunk in line_fields(
            plane, track, linked.get(id(track), set()), names, self.chunk_events
        ):
            spool.write(chunk)
            size += len(chunk)
        return size

    def _write_host_plane(
        self,
        outfile: BinaryOutput,
        plane_id: int,
        plane: PlaneMetadata,
        lines: list[_HostLine],
        spool: IO[bytes],
    ) -> None:
        """The host threads' API calls and ranges, one line per thread track."""
        several = len({line.task for line in lines}) > 1
        heads = []
        for index, line in enumerate(lines):
            # Line ids must be unique in a plane; thread ids repeat across tasks.
            line_id = index if several else line.thread
            name = line.track if several else f"thread:{line.thread}"
            heads.append(LINE_ID + varint(line_id) + string_field(LINE_NAME, name))
        meta: bytes = plane.proto.SerializeToString()
        size = len(meta) + sum(
            len(PLANE_LINE) + len(varint(len(h) + line.size)) + len(h) + line.size
            for h, line in zip(heads, lines, strict=True)
        )
        outfile.write(plane_field(plane_id, HOST_PLANE, size))
        outfile.write(meta)
        spool.seek(0)
        for head, line in zip(heads, lines, strict=True):
            outfile.write(PLANE_LINE + varint(len(head) + line.size) + head)
            _copy(spool, outfile, line.size)

    def _task_env(self, plane_id: int, timeline: PartedTimeline) -> bytes:
        plane = PlaneMetadata(xplane().XPlane())
        origin = timeline.origin_ns
        plane.proto.stats.add(metadata_id=plane.stat_id("profile_start_time"), uint64_value=origin)
        plane.proto.stats.add(
            metadata_id=plane.stat_id("profile_stop_time"), uint64_value=origin + timeline.end_ns
        )
        return plane_field(plane_id, TASK_ENV_PLANE, plane.proto.SerializeToString())


def _copy(src: IO[bytes], dst: BinaryOutput, size: int) -> None:
    while size:
        block = src.read(min(size, 1 << 20))
        if not block:
            raise OSError("the spooled host lines ended early")
        dst.write(block)
        size -= len(block)


def _gpu_groups(
    part: TimelinePart,
) -> Iterator[tuple[tuple[str, str], int, list[SliceTrack]]]:
    """((job, task), ordinal, stream tracks) per (job, task, GPU) of the part; memcpy
    tracks repeat copies and are left out."""
    groups: dict[tuple[str, str, int], list[SliceTrack]] = {}
    for track in part.slices:
        key = track.key
        if key.kind is TrackKind.STREAM:
            groups.setdefault((key.job, key.task, key.gpu), []).append(track)
    for (job, task, gpu), tracks in groups.items():
        yield (job, task), gpu, tracks


def _linked_slices(part: TimelinePart) -> dict[int, set[int]]:
    """Per track (by ``id``), the slices at either end of a launch flow."""
    out: dict[int, set[int]] = {}
    flows = part.flows
    for tracks, slices in ((flows.from_track, flows.from_slice), (flows.to_track, flows.to_slice)):
        for t, i in zip(tracks.tolist(), slices.tolist(), strict=True):
            out.setdefault(id(part.slices[t]), set()).add(i)
    return out
