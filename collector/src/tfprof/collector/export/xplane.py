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

import numpy as np

from tfprof.collector.export.args import label_column
from tfprof.collector.export.output import BinaryOutput
from tfprof.collector.export.protowire import LEN, VARINT, tag, varint
from tfprof.collector.timeline.build import SliceTrack, Timeline
from tfprof.collector.timeline.model import PartedTimeline, TimelinePart, parted
from tfprof.core.cupti_labels import MEMORY_KINDS
from tfprof.core.records import RecordKind
from tfprof.core.tracks import TrackKind
from tfprof.readers.tfprotos import xplane

GPU_PLANE_PREFIX = "/device:GPU:"
HOST_PLANE = "/host:CPU"
TASK_ENV_PLANE = "Task Environment"
# TensorFlow's names of CUPTI event types, as its stream lines list them.
_COPY_TYPES = {1: "MemcpyH2D", 2: "MemcpyD2H", 8: "MemcpyD2D", 10: "MemcpyP2P"}
_STAT_NAMES = (
    "correlation_id",
    "context_id",
    "tf_op",
    "kernel_details",
    "memcpy_details",
    "memset_details",
    "tfprof_device",
    "device_vendor",
    "compute_cap_major",
    "compute_cap_minor",
    "core_count",
    "memory_size",
    "profile_start_time",
    "profile_stop_time",
)


CHUNK_EVENTS = 1 << 14  # events built as protobuf objects at once
SPOOL_BYTES = 64 << 20  # host lines kept in memory up to this, then in a temporary file
_SPACE_PLANE = tag(1, LEN)  # XSpace.planes
_SPACE_HOSTNAME = tag(4, LEN)  # XSpace.hostnames
_PLANE_ID, _PLANE_NAME, _PLANE_LINE = tag(1, VARINT), tag(2, LEN), tag(3, LEN)
_LINE_ID, _LINE_NAME = tag(1, VARINT), tag(2, LEN)


def _string(field_tag: bytes, text: str) -> bytes:
    data = text.encode()
    return field_tag + varint(len(data)) + data


def _plane(plane_id: int, name: str, body: bytes | int) -> bytes:
    """An ``XSpace.planes`` field: id and name, then ``body`` (the rest of the plane's
    fields) or, given a length, only the head of a plane whose body follows."""
    head = _PLANE_ID + varint(plane_id) + _string(_PLANE_NAME, name)
    size = body if isinstance(body, int) else len(body)
    out = _SPACE_PLANE + varint(len(head) + size) + head
    return out if isinstance(body, int) else out + body


def run_name(origin_ns: int) -> str:
    """TensorFlow's profile run name: the session's UTC start, ``YYYY_MM_DD_HH_MM_SS``."""
    return time.strftime("%Y_%m_%d_%H_%M_%S", time.gmtime(origin_ns / 1e9))


def _safe_host(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name) or "localhost"


@dataclass
class _Plane:
    """Builds one GPU plane: interns event and stat metadata as they are first used."""

    proto: Any
    event_ids: dict[int, int] = field(default_factory=dict)
    stat_ids: dict[str, int] = field(default_factory=dict)
    ref_ids: dict[str, int] = field(default_factory=dict)

    def stat_id(self, name: str) -> int:
        found = self.stat_ids.get(name)
        if found is None:
            found = self.stat_ids[name] = len(self.stat_ids) + len(self.ref_ids) + 1
            self.proto.stat_metadata[found].id = found
            self.proto.stat_metadata[found].name = name
        return found

    def ref_id(self, text: str) -> int:
        """A string stat value interned as stat metadata, for ``ref_value``."""
        found = self.ref_ids.get(text)
        if found is None:
            found = self.ref_ids[text] = len(self.stat_ids) + len(self.ref_ids) + 1
            self.proto.stat_metadata[found].id = found
            self.proto.stat_metadata[found].name = text
        return found

    def event_id(self, name_id: int, names: tuple[str, ...]) -> int:
        found = self.event_ids.get(name_id)
        if found is None:
            found = self.event_ids[name_id] = len(self.event_ids) + 1
            self.proto.event_metadata[found].id = found
            self.proto.event_metadata[found].name = names[name_id]
        return found


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

    host: _Plane  # the /host:CPU plane's metadata, its lines spooled
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
        state = _SpaceState(_Plane(xplane().XPlane()))
        with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as spool:
            for part in timeline.parts():
                self._write_part(outfile, part, timeline, state, spool)
                del part  # its records are released before the next part is read
            for ordinal, body in state.waiting:
                outfile.write(_plane(ordinal, f"{GPU_PLANE_PREFIX}{ordinal}", body))
                state.planes += 1
            if state.host_lines:
                self._write_host_plane(outfile, state.planes, state.host, state.host_lines, spool)
                state.planes += 1
        outfile.write(self._task_env(state.planes, timeline))
        outfile.write(_string(_SPACE_HOSTNAME, self.host))

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
            body = self._gpu_plane(tracks, linked, timeline, part.names)
            state.first_task = state.first_task or task
            if not state.renumber and task == state.first_task:
                state.waiting.append((ordinal, body))
                continue
            state.renumber = True
            for _, held in state.waiting:
                outfile.write(_plane(state.planes, f"{GPU_PLANE_PREFIX}{state.planes}", held))
                state.planes += 1
            state.waiting = []
            outfile.write(_plane(state.planes, f"{GPU_PLANE_PREFIX}{state.planes}", body))
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

    def _gpu_plane(
        self,
        tracks: list[SliceTrack],
        linked: dict[int, set[int]],
        timeline: PartedTimeline,
        names: tuple[str, ...],
    ) -> bytes:
        """One GPU's plane from its stream tracks (all of one job, task and GPU), without
        its id and name."""
        gpu = tracks[0].key
        plane = _Plane(xplane().XPlane())
        plane.proto.stats.add(
            metadata_id=plane.stat_id("tfprof_device"), str_value=gpu.device_prefix
        )
        plane.proto.stats.add(metadata_id=plane.stat_id("device_vendor"), str_value="Nvidia")
        meta = timeline.devices.get(gpu.job, {}).get(gpu.task, {}).get(str(gpu.gpu), {})
        major, _, minor = str(meta.get("compute_capability", "0.0")).partition(".")
        for name, value in (
            ("compute_cap_major", int(major or 0)),
            ("compute_cap_minor", int(minor or 0)),
            ("core_count", int(meta.get("sm_count", 0))),
            ("memory_size", int(meta.get("memory_bytes", 0))),
        ):
            if value:
                plane.proto.stats.add(metadata_id=plane.stat_id(name), uint64_value=value)
        lines = []
        for track in sorted(tracks, key=lambda t: t.key.stream):
            stream = track.key.stream
            head = _LINE_ID + varint(stream)
            head += _string(_LINE_NAME, f"Stream #{stream}({','.join(_event_types(track))})")
            body = b"".join(self._line(plane, track, linked.get(id(track), set()), names))
            line = head + body
            lines.append(_PLANE_LINE + varint(len(line)) + line)
        fields: bytes = plane.proto.SerializeToString()
        return fields + b"".join(lines)

    def _spool_line(
        self,
        spool: IO[bytes],
        plane: _Plane,
        track: SliceTrack,
        linked: dict[int, set[int]],
        names: tuple[str, ...],
    ) -> int:
        """A host thread line without its id and name, into ``spool``; its size."""
        size = 0
        for chunk in self._line(plane, track, linked.get(id(track), set()), names):
            spool.write(chunk)
            size += len(chunk)
        return size

    def _write_host_plane(
        self,
        outfile: BinaryOutput,
        plane_id: int,
        plane: _Plane,
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
            heads.append(_LINE_ID + varint(line_id) + _string(_LINE_NAME, name))
        meta: bytes = plane.proto.SerializeToString()
        size = len(meta) + sum(
            len(_PLANE_LINE) + len(varint(len(h) + line.size)) + len(h) + line.size
            for h, line in zip(heads, lines, strict=True)
        )
        outfile.write(_plane(plane_id, HOST_PLANE, size))
        outfile.write(meta)
        spool.seek(0)
        for head, line in zip(heads, lines, strict=True):
            outfile.write(_PLANE_LINE + varint(len(head) + line.size) + head)
            _copy(spool, outfile, line.size)

    def _line(
        self, plane: _Plane, track: SliceTrack, linked: set[int], names: tuple[str, ...]
    ) -> Iterator[bytes]:
        """A line's fields but its id and name: its times, then its events a chunk at a
        time (each an ``XLine`` holding only events: the pieces join into one line)."""
        pb = xplane()
        if len(track) == 0:
            return
        line_start = int(track.start_ns[0])
        head = pb.XLine(
            timestamp_ns=line_start, duration_ps=int((track.end_ns.max() - line_start) * 1000)
        )
        yield head.SerializeToString()
        details = _details(track, plane)
        corr_id, ctx_id = plane.stat_id("correlation_id"), plane.stat_id("context_id")
        tf_op_id = plane.stat_id("tf_op")
        detail_ids = {
            RecordKind.KERNEL: plane.stat_id("kernel_details"),
            RecordKind.MEMCPY: plane.stat_id("memcpy_details"),
            RecordKind.MEMSET: plane.stat_id("memset_details"),
        }
        for a in range(0, len(track), self.chunk_events):
            b = min(a + self.chunk_events, len(track))
            sel = slice(a, b)
            offsets = ((track.start_ns[sel] - np.int64(line_start)) * 1000).tolist()
            durations = (track.duration_ns[sel] * 1000).tolist()
            kinds = track.kind[sel].tolist()
            correlation = track.column("correlation", sel).tolist()
            context = track.column("context", sel).tolist()
            ops = [-1] * (b - a) if track.op_id is None else track.op_id[sel].tolist()
            chunk = pb.XLine()
            events = chunk.events
            for i, name_id in enumerate(track.name_id[sel].tolist()):
                event = events.add(
                    metadata_id=plane.event_id(name_id, names),
                    offset_ps=offsets[i],
                    duration_ps=durations[i],
                )
                stats = event.stats
                if a + i in linked:  # both ends of the launch flow are in the space
                    stats.add(metadata_id=corr_id, uint64_value=correlation[i])
                if context[i]:  # CUPTI numbers contexts from 1; 0: unknown
                    stats.add(metadata_id=ctx_id, uint64_value=context[i])
                if ops[i] >= 0:
                    stats.add(metadata_id=tf_op_id, ref_value=plane.ref_id(names[ops[i]]))
                ref = details[a + i]
                if ref:
                    stats.add(metadata_id=detail_ids[kinds[i]], ref_value=ref)
            yield chunk.SerializeToString()

    def _task_env(self, plane_id: int, timeline: PartedTimeline) -> bytes:
        plane = _Plane(xplane().XPlane())
        origin = timeline.origin_ns
        plane.proto.stats.add(metadata_id=plane.stat_id("profile_start_time"), uint64_value=origin)
        plane.proto.stats.add(
            metadata_id=plane.stat_id("profile_stop_time"), uint64_value=origin + timeline.end_ns
        )
        return _plane(plane_id, TASK_ENV_PLANE, plane.proto.SerializeToString())


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


def _event_types(track: SliceTrack) -> list[str]:
    types: list[str] = []
    kinds = set(np.unique(track.kind).tolist())
    if RecordKind.KERNEL in kinds:
        types.append("Kernel")
    if RecordKind.MEMCPY in kinds:
        copy_kinds = np.unique(track.column("copy_kind", track.kind == RecordKind.MEMCPY)).tolist()
        types.extend(dict.fromkeys(_COPY_TYPES.get(k, "MemcpyOther") for k in copy_kinds))
    if RecordKind.MEMSET in kinds:
        types.append("Memset")
    return types


def _details(track: SliceTrack, plane: _Plane) -> list[int]:
    """Per slice, the stat-metadata id of its details text (0: none), built kind by kind."""
    refs = [0] * len(track)
    for kind, build in (
        (RecordKind.KERNEL, _kernel_details),
        (RecordKind.MEMCPY, _memcpy_details),
        (RecordKind.MEMSET, _memset_details),
    ):
        sel = np.flatnonzero(track.kind == kind)
        if sel.shape[0] == 0:
            continue
        texts = build(track, sel)
        for i, text in zip(sel.tolist(), texts, strict=True):
            refs[i] = plane.ref_id(text)
    return refs


def _kernel_details(track: SliceTrack, sel: np.ndarray) -> list[str]:
    c = {name: track.column(name, sel).tolist() for name in (
        "registers", "static_smem", "dynamic_smem", "grid_x", "grid_y", "grid_z",
        "block_x", "block_y", "block_z",
    )}  # fmt: skip
    return [
        f"regs:{r} static_shared:{ss} dynamic_shared:{ds} grid:{gx},{gy},{gz} "
        f"block:{bx},{by},{bz} occ_pct:0"
        for r, ss, ds, gx, gy, gz, bx, by, bz in zip(*c.values(), strict=True)
    ]


def _memcpy_details(track: SliceTrack, sel: np.ndarray) -> list[str]:
    src = label_column(MEMORY_KINDS, track.column("src_kind", sel))
    dst = label_column(MEMORY_KINDS, track.column("dst_kind", sel))
    nbytes = track.column("bytes", sel).tolist()
    dest = track.column("dst_device", sel).tolist()
    return [
        f"kind_src:{s} kind_dst:{d} size:{n} dest:{dd} async:1"
        for s, d, n, dd in zip(src, dst, nbytes, dest, strict=True)
    ]


def _memset_details(track: SliceTrack, sel: np.ndarray) -> list[str]:
    kinds = label_column(MEMORY_KINDS, track.column("src_kind", sel))
    nbytes = track.column("bytes", sel).tolist()
    return [f"kind:{k} size:{n} async:1" for k, n in zip(kinds, nbytes, strict=True)]
