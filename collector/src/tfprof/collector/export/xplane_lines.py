"""XPlane's lines: a GPU plane's stats, a line's events with their stats a part at a
time, and the details texts (``kernel_details``, ``memcpy_details``, ``memset_details``)
XProf's kernel_stats parses."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from tfprof.collector.export.args import label_column
from tfprof.collector.export.part_spool import Spooled
from tfprof.collector.export.xplane_wire import PlaneMetadata
from tfprof.collector.timeline.model import PartedTimeline, SliceTrack
from tfprof.core.cupti_labels import MEMORY_KINDS
from tfprof.core.records import RecordKind
from tfprof.core.tracks import TrackKey
from tfprof.readers.tfprotos import xplane

# TensorFlow's names of CUPTI event types, as its stream lines list them.
COPY_TYPES = {1: "MemcpyH2D", 2: "MemcpyD2H", 8: "MemcpyD2D", 10: "MemcpyP2P"}


def gpu_plane_metadata(key: TrackKey, timeline: PartedTimeline) -> PlaneMetadata:
    """The plane of the GPU of stream track ``key`` (one job, task and GPU), with its
    stats: the device and its capabilities where known."""
    plane = PlaneMetadata(xplane().XPlane())
    plane.proto.stats.add(metadata_id=plane.stat_id("tfprof_device"), str_value=key.device_prefix)
    plane.proto.stats.add(metadata_id=plane.stat_id("device_vendor"), str_value="Nvidia")
    meta = timeline.devices.get(key.job, {}).get(key.task, {}).get(str(key.gpu), {})
    major, _, minor = str(meta.get("compute_capability", "0.0")).partition(".")
    for name, value in (
        ("compute_cap_major", int(major or 0)),
        ("compute_cap_minor", int(minor or 0)),
        ("core_count", int(meta.get("sm_count", 0))),
        ("memory_size", int(meta.get("memory_bytes", 0))),
    ):
        if value:
            plane.proto.stats.add(metadata_id=plane.stat_id(name), uint64_value=value)
    return plane


@dataclass
class SpooledLine:
    """One line's events, spooled as parts bring its slices; its times and (on a GPU
    plane) the kinds of activity TensorFlow names a stream line after."""

    events: Spooled = field(default_factory=Spooled)
    start_ns: int | None = None  # its first slice's start: events are offset from it
    end_ns: int = 0
    kinds: set[int] = field(default_factory=set)
    copy_kinds: set[int] = field(default_factory=set)

    def add(self, track: SliceTrack) -> int:
        """Takes in the times and kinds of a part's share of the line; the start its
        events are offset from."""
        if self.start_ns is None:
            self.start_ns = int(track.start_ns[0])  # parts come in time order
        self.end_ns = max(self.end_ns, int(track.end_ns.max()))
        kinds = np.unique(track.kind).tolist()
        self.kinds.update(kinds)
        if RecordKind.MEMCPY in kinds:
            copies = track.column("copy_kind", track.kind == RecordKind.MEMCPY)
            self.copy_kinds.update(np.unique(copies).tolist())
        return self.start_ns

    def head(self) -> bytes:
        """The line's times (nothing for a line without events), before its events."""
        if self.start_ns is None:
            return b""
        line = xplane().XLine(
            timestamp_ns=self.start_ns, duration_ps=(self.end_ns - self.start_ns) * 1000
        )
        head: bytes = line.SerializeToString()
        return head

    def event_types(self) -> list[str]:
        types: list[str] = []
        if RecordKind.KERNEL in self.kinds:
            types.append("Kernel")
        if RecordKind.MEMCPY in self.kinds:
            copies = sorted(self.copy_kinds)
            types.extend(dict.fromkeys(COPY_TYPES.get(k, "MemcpyOther") for k in copies))
        if RecordKind.MEMSET in self.kinds:
            types.append("Memset")
        return types


def line_events(
    plane: PlaneMetadata,
    track: SliceTrack,
    line_start: int,
    linked: set[int],
    names: tuple[str, ...],
    chunk_events: int,
) -> Iterator[bytes]:
    """A part's events of a line, offset from ``line_start``, a chunk at a time (each an
    ``XLine`` holding only events: the pieces join into one line)."""
    pb = xplane()
    if len(track) == 0:
        return
    details = details_refs(track, plane)
    corr_id, ctx_id = plane.stat_id("correlation_id"), plane.stat_id("context_id")
    tf_op_id = plane.stat_id("tf_op")
    detail_ids = {
        RecordKind.KERNEL: plane.stat_id("kernel_details"),
        RecordKind.MEMCPY: plane.stat_id("memcpy_details"),
        RecordKind.MEMSET: plane.stat_id("memset_details"),
    }
    for a in range(0, len(track), chunk_events):
        b = min(a + chunk_events, len(track))
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
            if a + i in linked:  # an end of a launch flow (both ends are in the space)
                stats.add(metadata_id=corr_id, uint64_value=correlation[i])
            if context[i]:  # CUPTI numbers contexts from 1; 0: unknown
                stats.add(metadata_id=ctx_id, uint64_value=context[i])
            if ops[i] >= 0:
                stats.add(metadata_id=tf_op_id, ref_value=plane.ref_id(names[ops[i]]))
            ref = details[a + i]
            if ref:
                stats.add(metadata_id=detail_ids[kinds[i]], ref_value=ref)
        yield chunk.SerializeToString()


def details_refs(track: SliceTrack, plane: PlaneMetadata) -> list[int]:
    """Per slice, the stat-metadata id of its details text (0: none), built kind by kind."""
    refs = [0] * len(track)
    for kind, build in (
        (RecordKind.KERNEL, kernel_details),
        (RecordKind.MEMCPY, memcpy_details),
        (RecordKind.MEMSET, memset_details),
    ):
        sel = np.flatnonzero(track.kind == kind)
        if sel.shape[0] == 0:
            continue
        texts = build(track, sel)
        for i, text in zip(sel.tolist(), texts, strict=True):
            refs[i] = plane.ref_id(text)
    return refs


def kernel_details(track: SliceTrack, sel: np.ndarray) -> list[str]:
    c = {name: track.column(name, sel).tolist() for name in (
        "registers", "static_smem", "dynamic_smem", "grid_x", "grid_y", "grid_z",
        "block_x", "block_y", "block_z",
    )}  # fmt: skip
    return [
        f"regs:{r} static_shared:{ss} dynamic_shared:{ds} grid:{gx},{gy},{gz} "
        f"block:{bx},{by},{bz} occ_pct:0"
        for r, ss, ds, gx, gy, gz, bx, by, bz in zip(*c.values(), strict=True)
    ]


def memcpy_details(track: SliceTrack, sel: np.ndarray) -> list[str]:
    src = label_column(MEMORY_KINDS, track.column("src_kind", sel))
    dst = label_column(MEMORY_KINDS, track.column("dst_kind", sel))
    nbytes = track.column("bytes", sel).tolist()
    dest = track.column("dst_device", sel).tolist()
    return [
        f"kind_src:{s} kind_dst:{d} size:{n} dest:{dd} async:1"
        for s, d, n, dd in zip(src, dst, nbytes, dest, strict=True)
    ]


def memset_details(track: SliceTrack, sel: np.ndarray) -> list[str]:
    kinds = label_column(MEMORY_KINDS, track.column("src_kind", sel))
    nbytes = track.column("bytes", sel).tolist()
    return [f"kind:{k} size:{n} async:1" for k, n in zip(kinds, nbytes, strict=True)]
