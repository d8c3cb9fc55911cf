"""What every exporter attaches to a slice: its category and args, named as in Chrome JSON.

The Chrome reporter builds its event dicts directly (that path is tuned); the binary
formats (Perfetto, XPlane) read the same values from here, a chunk of one kind at a
time, so a slice carries the same args in every format.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tfprof.collector.export.chrome import _COPY_KINDS, _MEMORY_KINDS, _dims, _labels
from tfprof.collector.merge import SliceTrack
from tfprof.collector.model import SYNC_TYPE_NAMES
from tfprof.core.records import RecordKind

OTHER_CATEGORY = "activity"
CATEGORIES: dict[int, str] = {
    RecordKind.KERNEL: "kernel",
    RecordKind.MEMCPY: "memcpy",
    RecordKind.MEMSET: "memset",
    RecordKind.SYNC: "sync",
}
_COMMON = ("correlation", "device", "stream", "context")
_NEEDED: dict[int | None, tuple[str, ...]] = {
    RecordKind.KERNEL: (
        *("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"),
        *("registers", "static_smem", "dynamic_smem", *_COMMON),
    ),
    RecordKind.MEMCPY: ("bytes", "copy_kind", "src_kind", "dst_kind", "dst_device", *_COMMON),
    RecordKind.MEMSET: ("bytes", "src_kind", *_COMMON),
    RecordKind.SYNC: ("sync_type", *_COMMON),
    None: ("kind", *_COMMON),
}
_PEER_COPY = 10
_SYNC_TYPES = np.array(
    [SYNC_TYPE_NAMES.get(i, "Unknown") for i in range(max(SYNC_TYPE_NAMES) + 2)], dtype=object
)
_SYNC_TYPES[-1] = "Unknown"


def category_name(kind: int | None) -> str:
    return CATEGORIES.get(kind, OTHER_CATEGORY) if kind is not None else OTHER_CATEGORY


def slice_args(track: SliceTrack, kind: int | None, sel: np.ndarray) -> list[tuple[str, list[Any]]]:
    """The args of the slices ``sel`` (all of kind ``kind``), one list per arg, in order.

    Values are ints, strings, or floats (GB/s, NaN where a copy took no time); a peer
    copy's ``dst device`` is -1 on other copies, meaning absent.
    """
    cols = {c: track.column(c, sel) for c in _NEEDED[kind if kind in _NEEDED else None]}
    common = [(name, cols[name].tolist()) for name in _COMMON]
    if kind == RecordKind.KERNEL:
        return [
            ("grid", _dims(cols["grid_x"], cols["grid_y"], cols["grid_z"])),
            ("block", _dims(cols["block_x"], cols["block_y"], cols["block_z"])),
            ("registers per thread", cols["registers"].tolist()),
            ("static shared memory", cols["static_smem"].tolist()),
            ("dynamic shared memory", cols["dynamic_smem"].tolist()),
            *common,
        ]
    if kind == RecordKind.MEMCPY:
        nbytes, duration = cols["bytes"], track.duration_ns[sel]
        with np.errstate(divide="ignore", invalid="ignore"):
            rate = np.where(duration > 0, np.round(nbytes / duration, 3), np.nan)
        peer = cols["copy_kind"] == _PEER_COPY
        return [
            ("bytes", nbytes.tolist()),
            ("kind", _labels(_COPY_KINDS, cols["copy_kind"])),
            ("src kind", _labels(_MEMORY_KINDS, cols["src_kind"])),
            ("dst kind", _labels(_MEMORY_KINDS, cols["dst_kind"])),
            ("GB/s", rate.tolist()),
            *common,
            ("dst device", np.where(peer, cols["dst_device"], -1).tolist()),
        ]
    if kind == RecordKind.MEMSET:
        return [
            ("bytes", cols["bytes"].tolist()),
            ("memory kind", _labels(_MEMORY_KINDS, cols["src_kind"])),
            *common,
        ]
    if kind == RecordKind.SYNC:
        return [("sync type", _labels(_SYNC_TYPES, cols["sync_type"])), *common]
    return [("kind", cols["kind"].tolist()), *common]
