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

The space is one protobuf message, built per plane and serialised once: unlike the
Perfetto export its memory grows with the trace (bench/export_formats.py measures it).
"""

from __future__ import annotations

import os
import re
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tfprof.collector.export.args import label_column
from tfprof.collector.export.output import BinaryOutput
from tfprof.collector.merge import SliceTrack, Timeline
from tfprof.core.cupti_labels import MEMORY_KINDS
from tfprof.core.formats.tfprotos import xplane
from tfprof.core.records import RecordKind
from tfprof.core.tracks import TrackKind

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


class XPlaneReporter:
    """Renders a ``Timeline`` as a serialised ``XSpace``."""

    format_name = "xplane"

    def __init__(self, timeline: Timeline, host: str | None = None) -> None:
        self.timeline = timeline
        self._linked = _linked_slices(timeline)
        hosts = sorted(
            {h for job in timeline.metadata.get("jobs", []) for h in job.get("hosts", [])}
        )
        self.host = _safe_host(host or (hosts[0] if len(hosts) == 1 else socket.gethostname()))

    def output_file(self, path: Path) -> Path:
        """``path`` itself if it ends in ``.xplane.pb``, else the file in the logdir ``path``."""
        if path.name.lower().endswith(".xplane.pb"):
            return path
        run = run_name(self.timeline.origin_ns)
        return path / "plugins" / "profile" / run / f"{self.host}.xplane.pb"

    def render(self, outfile: BinaryOutput) -> None:
        outfile.write(self.space().SerializeToString())

    def space(self) -> Any:
        pb = xplane()
        space = pb.XSpace()
        space.hostnames.append(self.host)
        # One plane per (job, task, GPU): its stream tracks; memcpy tracks repeat copies.
        groups: dict[tuple[str, str, int], list[SliceTrack]] = {}
        for track in self.timeline.slices:
            key = track.key
            if key.kind is TrackKind.STREAM:
                groups.setdefault((key.job, key.task, key.gpu), []).append(track)
        ordinals = [gpu for _, _, gpu in groups]
        renumber = len(set(ordinals)) != len(ordinals) or len({g[:2] for g in groups}) > 1
        for index, tracks in enumerate(groups.values()):
            self._gpu_plane(space, index if renumber else tracks[0].key.gpu, tracks)
        threads = [t for t in self.timeline.slices if t.key.kind is TrackKind.THREAD]
        if threads:
            self._host_plane(space, threads)
        self._task_env(space)
        return space

    def _gpu_plane(self, space: Any, ordinal: int, tracks: list[SliceTrack]) -> None:
        """One GPU's plane from its stream tracks (all of one job, task and GPU)."""
        gpu = tracks[0].key
        plane = _Plane(space.planes.add())
        plane.proto.id = ordinal
        plane.proto.name = f"{GPU_PLANE_PREFIX}{ordinal}"
        plane.proto.stats.add(
            metadata_id=plane.stat_id("tfprof_device"), str_value=gpu.device_prefix
        )
        plane.proto.stats.add(metadata_id=plane.stat_id("device_vendor"), str_value="Nvidia")
        devices = self.timeline.metadata.get("devices", {})
        meta = devices.get(gpu.job, {}).get(gpu.task, {}).get(str(gpu.gpu), {})
        major, _, minor = str(meta.get("compute_capability", "0.0")).partition(".")
        for name, value in (
            ("compute_cap_major", int(major or 0)),
            ("compute_cap_minor", int(minor or 0)),
            ("core_count", int(meta.get("sm_count", 0))),
            ("memory_size", int(meta.get("memory_bytes", 0))),
        ):
            if value:
                plane.proto.stats.add(metadata_id=plane.stat_id(name), uint64_value=value)
        for track in sorted(tracks, key=lambda t: t.key.stream):
            self._line(plane, track.key.stream, track)

    def _host_plane(self, space: Any, tracks: list[SliceTrack]) -> None:
        """The host threads' API calls and ranges, one line per thread track."""
        plane = _Plane(space.planes.add())
        plane.proto.id = len(space.planes) - 1
        plane.proto.name = HOST_PLANE
        several = len({t.key.task_prefix for t in tracks}) > 1
        for index, track in enumerate(tracks):
            name = track.name if several else f"thread:{track.key.thread}"
            # Line ids must be unique in a plane; thread ids repeat across tasks.
            self._line(plane, track.key.thread if not several else index, track, name)

    def _line(
        self, plane: _Plane, line_id: int, track: SliceTrack, name: str | None = None
    ) -> None:
        line = plane.proto.lines.add()
        line.id = line_id
        line.name = name or f"Stream #{line_id}({','.join(_event_types(track))})"
        if len(track) == 0:
            return
        line_start = int(track.start_ns[0])
        line.timestamp_ns = line_start
        offsets = ((track.start_ns - np.int64(line_start)) * 1000).tolist()
        durations = (track.duration_ns * 1000).tolist()
        line.duration_ps = int((track.end_ns.max() - line_start) * 1000)
        details = _details(track, plane)
        names = self.timeline.names
        kinds = track.kind.tolist()
        correlation = track.column("correlation").tolist()
        context = track.column("context").tolist()
        corr_id, ctx_id = plane.stat_id("correlation_id"), plane.stat_id("context_id")
        tf_op_id = plane.stat_id("tf_op")
        ops = [-1] * len(track) if track.op_id is None else track.op_id.tolist()
        linked = self._linked.get(id(track), set())
        detail_ids = {
            RecordKind.KERNEL: plane.stat_id("kernel_details"),
            RecordKind.MEMCPY: plane.stat_id("memcpy_details"),
            RecordKind.MEMSET: plane.stat_id("memset_details"),
        }
        events = line.events
        for i, name_id in enumerate(track.name_id.tolist()):
            event = events.add(
                metadata_id=plane.event_id(name_id, names),
                offset_ps=offsets[i],
                duration_ps=durations[i],
            )
            stats = event.stats
            if i in linked:  # both ends of the launch flow are in the space
                stats.add(metadata_id=corr_id, uint64_value=correlation[i])
            if context[i]:  # CUPTI numbers contexts from 1; 0: unknown
                stats.add(metadata_id=ctx_id, uint64_value=context[i])
            if ops[i] >= 0:
                stats.add(metadata_id=tf_op_id, ref_value=plane.ref_id(names[ops[i]]))
            ref = details[i]
            if ref:
                stats.add(metadata_id=detail_ids[kinds[i]], ref_value=ref)

    def _task_env(self, space: Any) -> None:
        plane = _Plane(space.planes.add())
        plane.proto.id = len(space.planes) - 1
        plane.proto.name = TASK_ENV_PLANE
        origin = self.timeline.origin_ns
        end = max((int(t.end_ns.max()) for t in self.timeline.slices if len(t)), default=0)
        plane.proto.stats.add(metadata_id=plane.stat_id("profile_start_time"), uint64_value=origin)
        plane.proto.stats.add(
            metadata_id=plane.stat_id("profile_stop_time"), uint64_value=origin + end
        )


def _linked_slices(timeline: Timeline) -> dict[int, set[int]]:
    """Per track (by ``id``), the slices at either end of a launch flow."""
    out: dict[int, set[int]] = {}
    flows = timeline.flows
    for tracks, slices in ((flows.from_track, flows.from_slice), (flows.to_track, flows.to_slice)):
        for t, i in zip(tracks.tolist(), slices.tolist(), strict=True):
            out.setdefault(id(timeline.slices[t]), set()).add(i)
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


def default_logdir_file(logdir: str | os.PathLike[str], reporter: XPlaneReporter) -> Path:
    return reporter.output_file(Path(logdir))
