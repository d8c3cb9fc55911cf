"""The events of an XPlane line, a chunk at a time, and the metadata they intern.

``XPlane`` keeps event and stat metadata per plane: one event metadata per name, one
stat metadata per stat name and per repeated string value (``ref_value``: the op a
slice ran for, the details texts XProf's kernel_stats parses). ``PlaneMetadata``
interns them as events first use them and writes them once the plane is complete.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tfprof.collector.export.args import label_column
from tfprof.collector.timeline.model import SliceTrack
from tfprof.core.cupti_labels import MEMORY_KINDS
from tfprof.core.records import RecordKind
from tfprof.readers.tfprotos import xplane

# Details texts a plane interns for ``ref_value`` at most; later new texts are written
# in place (``str_value``), so a plane's metadata stays bounded however many distinct
# copy sizes or launch shapes a long run has. XProf reads either.
MAX_DETAIL_REFS = 1 << 16
# TensorFlow's names of CUPTI event types, as its stream lines list them.
COPY_TYPES = {1: "MemcpyH2D", 2: "MemcpyD2H", 8: "MemcpyD2D", 10: "MemcpyP2P"}


@dataclass
class PlaneMetadata:
    """One plane's stats and metadata, interned as they are first used."""

    proto: Any = field(default_factory=lambda: xplane().XPlane())
    event_ids: dict[int, int] = field(default_factory=dict)
    stat_ids: dict[str, int] = field(default_factory=dict)
    ref_ids: dict[str, int] = field(default_factory=dict)
    details: int = 0  # details texts interned (``detail_ref``)

    def stat_id(self, name: str) -> int:
        """A stat's name interned as stat metadata."""
        return self._interned(self.stat_ids, name)

    def ref_id(self, text: str) -> int:
        """A string stat value interned as stat metadata, for ``ref_value``."""
        return self._interned(self.ref_ids, text)

    def _interned(self, table: dict[str, int], name: str) -> int:
        """``name``'s id in ``table``; a new one is the plane's next stat metadata (stat
        names and string values share the ids)."""
        found = table.get(name)
        if found is None:
            found = table[name] = len(self.stat_ids) + len(self.ref_ids) + 1
            self.proto.stat_metadata[found].id = found
            self.proto.stat_metadata[found].name = name
        return found

    def detail_ref(self, text: str) -> int:
        """``text``'s stat-metadata id, interned while fewer than ``MAX_DETAIL_REFS``
        details are; 0 once the table is full and ``text`` is not in it."""
        found = self.ref_ids.get(text)
        if found is not None:
            return found
        if self.details >= MAX_DETAIL_REFS:
            return 0
        self.details += 1
        return self.ref_id(text)

    def event_id(self, name_id: int, names: Sequence[str]) -> int:
        found = self.event_ids.get(name_id)
        if found is None:
            found = self.event_ids[name_id] = len(self.event_ids) + 1
            self.proto.event_metadata[found].id = found
            self.proto.event_metadata[found].name = names[name_id]
        return found


@dataclass
class LineKinds:
    """What kinds of GPU activity a stream line holds (TensorFlow names the line after
    them), gathered as its slices come."""

    kinds: set[int] = field(default_factory=set)
    copy_kinds: set[int] = field(default_factory=set)

    def add(self, track: SliceTrack) -> None:
        kinds = np.unique(track.kind).tolist()
        self.kinds.update(kinds)
        if RecordKind.MEMCPY in kinds:
            copies = track.column("copy_kind", track.kind == RecordKind.MEMCPY)
            self.copy_kinds.update(np.unique(copies).tolist())

    def types(self) -> list[str]:
        types: list[str] = []
        if RecordKind.KERNEL in self.kinds:
            types.append("Kernel")
        if RecordKind.MEMCPY in self.kinds:
            found = (COPY_TYPES.get(k, "MemcpyOther") for k in sorted(self.copy_kinds))
            types.extend(dict.fromkeys(found))
        if RecordKind.MEMSET in self.kinds:
            types.append("Memset")
        return types


def line_events(
    plane: PlaneMetadata,
    track: SliceTrack,
    linked: set[int],
    names: Sequence[str],
    line_start: int,
    chunk_events: int,
) -> Iterator[bytes]:
    """The slices' events as serialised ``XLine`` pieces holding only events (pieces of
    one line join into it), offsets from the line's start (``line_start``, ns);
    ``linked``: the slices at either end of a launch flow."""
    pb = xplane()
    details = _details(track, plane)
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
            if a + i in linked:  # both ends of the launch flow are in the space
                stats.add(metadata_id=corr_id, uint64_value=correlation[i])
            if context[i]:  # CUPTI numbers contexts from 1; 0: unknown
                stats.add(metadata_id=ctx_id, uint64_value=context[i])
            if ops[i] >= 0:
                stats.add(metadata_id=tf_op_id, ref_value=plane.ref_id(names[ops[i]]))
            ref, text = details[a + i]
            if ref:
                stats.add(metadata_id=detail_ids[kinds[i]], ref_value=ref)
            elif text:
                stats.add(metadata_id=detail_ids[kinds[i]], str_value=text)
        yield chunk.SerializeToString()


def _details(track: SliceTrack, plane: PlaneMetadata) -> list[tuple[int, str]]:
    """Per slice, its details text's stat-metadata id, or 0 and the text itself when the
    plane interns no more (``MAX_DETAIL_REFS``); (0, "") for none. Built kind by kind."""
    refs = [(0, "")] * len(track)
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
            ref = plane.detail_ref(text)
            refs[i] = (ref, "" if ref else text)
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
