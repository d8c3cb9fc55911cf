"""Decoding completed CUPTI buffers into ``RecordTable`` batches, in bulk.

CUPTI hands completed buffers to the source as a list of cupti-python record objects,
one class per kind and struct version (cupti-python 13.4 gives ActivityKernel13,
ActivityMemcpy7, ActivityMemset5, ActivityDevice6, ActivityContext4,
ActivitySynchronization2, and for the host side ActivityAPI (runtime and driver calls),
ActivityMarker2 (NVTX) and ActivityMemory4 (MEMORY2); records are matched by class,
never assumed). Reading fields
through Python attributes costs several times what decoding the structs does
(bench/hook_cost.py, bench/results/cpu-host-side.txt), so the converter copies the raw C
structs instead (each object's ``.ptr`` is the address of its own copy of the struct)
and decodes whole groups at once with cupti-python's numpy dtypes (``cupti_layouts``).
Records of a class without a usable dtype (a
future struct version) still go through attribute reads, so a cupti-python upgrade
costs speed, not data.

Loaded only once cupti-python is (``CuptiSource.bind``); numpy, which cupti-python
needs anyway, is imported inside the methods so that the agent never needs it at
import time.
"""

from __future__ import annotations

import ctypes
import itertools
import operator
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

from tfprof.agent.inprocess.sources.base import Sink
from tfprof.agent.inprocess.sources.cupti_api import ApiNames
from tfprof.agent.inprocess.sources.cupti_layouts import (
    API,
    CONTEXT,
    DEVICE,
    KERNEL,
    MARKER,
    MEMCPY,
    MEMORY,
    MEMSET,
    PEER_COPY,
    SYNC,
    Layout,
    discover_layouts,
)
from tfprof.agent.inprocess.sources.cupti_markers import MarkerRanges
from tfprof.core.records import COLUMN_INDEX, NUM_COLUMNS, DeviceInfo, RecordKind, RecordTable

if TYPE_CHECKING:
    import numpy as np
from tfprof.agent.inprocess.sources.cupti_attribute_rows import AttributeRows

_C = COLUMN_INDEX  # short alias for the column rows below
# Largest gap between two records copied along with them: well under the smallest page
# size (4 KiB), so always mapped memory, and small enough not to waste copying.
_MAX_GAP = 256


def format_uuid(raw: bytes) -> str:
    """A device UUID as nvidia-smi prints it: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx."""
    h = bytes(raw[:16]).hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


class RecordConverter(AttributeRows):
    """Turns the record objects of one completed CUPTI buffer into a ``RecordTable``.

    Not thread-safe by itself; ``CuptiSource`` serialises calls (CUPTI may complete
    buffers on its own thread while ``stop`` flushes on another).
    """

    def __init__(self, sink: Sink, cupti: ModuleType) -> None:
        import numpy as np

        self._sink = sink
        self._layouts = discover_layouts(cupti)
        self._code_of: dict[type, int] = {lay.cls: i for i, lay in enumerate(self._layouts)}
        self._sizes = np.array([lay.words * 8 for lay in self._layouts], dtype=np.int64)
        ak = cupti.ActivityKind
        self._family_of_kind = {
            int(ak.CONCURRENT_KERNEL): KERNEL,
            int(ak.KERNEL): KERNEL,
            int(ak.MEMCPY): MEMCPY,
            int(ak.MEMCPY2): PEER_COPY,
            int(ak.MEMSET): MEMSET,
            int(ak.DEVICE): DEVICE,
            int(ak.CONTEXT): CONTEXT,
            int(ak.SYNCHRONIZATION): SYNC,
            int(ak.RUNTIME): API,
            int(ak.DRIVER): API,
            int(ak.MARKER): MARKER,
            int(ak.MEMORY2): MEMORY,
        }
        self._runtime_kind = int(ak.RUNTIME)
        self._api_names = ApiNames(cupti)
        self._api_name_of: dict[int, int] = {}  # category << 32 | cbid -> name id
        self._domain_by_ptr: dict[int, int] = {0: 0}  # the default NVTX domain: ""
        self.markers = MarkerRanges()
        self._unpaired_reported = 0
        self._ptr = operator.attrgetter("ptr")
        self._names: dict[bytes, int] = {b"": 0}
        self._name_by_ptr: dict[int, int] = {0: 0}
        self._devices: set[tuple[int, str]] = set()
        self.context_device: dict[int, int] = {}  # CUPTI context id -> device ordinal

    # -- bulk path ----------------------------------------------------------------------

    def convert(self, activities: Sequence[Any]) -> RecordTable | None:
        """The buffer's records as one table (None when there are none).

        Device and context records are handled on the way (``sink.add_devices``);
        marker starts wait for their end (``markers``).
        """
        try:
            return self._convert(activities)
        finally:
            self._report_unpaired()

    def close_markers(self, now_ns: int) -> RecordTable | None:
        """NVTX ranges still open, ended at ``now_ns``: called once tracing stops."""
        rows = self._marker_rows(self.markers.close(now_ns))
        return RecordTable(list(rows)) if rows.shape[1] else None

    def _report_unpaired(self) -> None:
        unpaired = self.markers.unpaired
        if unpaired != self._unpaired_reported:
            self._sink.add_tracer_dropped(unpaired - self._unpaired_reported)
            self._unpaired_reported = unpaired

    def _convert(self, activities: Sequence[Any]) -> RecordTable | None:
        import numpy as np

        n = len(activities)
        if n == 0:
            return None
        get = self._code_of.get
        codes = np.fromiter(map(get, map(type, activities), itertools.repeat(-1, n)), np.int64, n)
        known = codes >= 0
        leftovers: list[Any] = []
        if not known.all():
            leftovers = [a for a, ok in zip(activities, known.tolist()) if not ok]
            activities = [a for a, ok in zip(activities, known.tolist()) if ok]
            codes = codes[known]
            n = len(activities)
        parts: list[Any] = []
        if n:
            parts.append(self._convert_known(activities, codes))
        if leftovers:
            parts.append(self._convert_by_attributes(leftovers))
        rows = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)
        if rows.shape[1] == 0:
            return None
        return RecordTable(list(rows))

    def _convert_known(self, activities: Sequence[Any], codes: np.ndarray) -> np.ndarray:
        import numpy as np

        n = len(activities)
        ptrs = np.fromiter(map(self._ptr, activities), np.int64, n)
        sizes = self._sizes[codes]
        raw, offsets = self._copy_structs(ptrs, sizes)
        words = np.frombuffer(raw, dtype=np.uint64)
        word_offsets = offsets // 8
        out_parts = []
        present = np.flatnonzero(np.bincount(codes)).tolist()
        for code in present:
            layout = self._layouts[code]
            rows = word_offsets if len(present) == 1 else word_offsets[codes == code]
            recs = self._structs(raw, words, rows, layout)
            family = layout.family
            if family == DEVICE:
                self._add_devices(recs)
            elif family == CONTEXT:
                for ctx, dev in zip(recs["context_id"].tolist(), recs["device_id"].tolist()):
                    self.context_device[ctx] = dev
            else:
                out_parts.append(self._fill(family, recs))
        if not out_parts:
            return np.zeros((NUM_COLUMNS, 0), dtype=np.int64)
        return out_parts[0] if len(out_parts) == 1 else np.concatenate(out_parts, axis=1)

    def _copy_structs(self, ptrs: np.ndarray, sizes: np.ndarray) -> tuple[bytes, np.ndarray]:
        """Copy every record's C struct into one bytes object, with each one's offset.

        cupti-python copies each record out of CUPTI's buffer into its own heap block,
        so consecutive records usually sit one malloc chunk apart (248-byte kernel
        structs 256 bytes apart). A run of records with small gaps is copied with one
        ``string_at``: a gap shorter than a page lies on pages that also hold a record,
        so it is mapped memory; it is never interpreted.
        """
        import numpy as np

        n = len(ptrs)
        ends = ptrs + sizes
        gaps = ptrs[1:] - ends[:-1]
        if (ptrs & 7).any():  # unaligned structs: copy one by one (never seen)
            raw = b"".join(map(ctypes.string_at, ptrs.tolist(), sizes.tolist()))
            return raw, np.cumsum(sizes) - sizes
        breaks = np.flatnonzero((gaps < 0) | (gaps > _MAX_GAP)) + 1
        if len(breaks) == 0:
            first = int(ptrs[0])
            return ctypes.string_at(first, int(ends[-1]) - first), ptrs - first
        run_first = np.concatenate(([0], breaks))
        run_last = np.concatenate((breaks, [n])) - 1
        starts, lengths = ptrs[run_first], ends[run_last] - ptrs[run_first]
        raw = b"".join(map(ctypes.string_at, starts.tolist(), lengths.tolist()))
        # where each run begins in ``raw``, repeated for each of its records
        run_base = np.cumsum(lengths) - lengths - starts
        offsets = ptrs + np.repeat(run_base, run_last - run_first + 1)
        return raw, offsets

    def _structs(self, raw: bytes, words: np.ndarray, rows: np.ndarray, layout: Layout) -> Any:
        """The records at ``rows`` (word offsets into ``raw``) as a structured array."""
        import numpy as np

        m = len(rows)
        if m == 1:
            return np.ndarray((1,), layout.dtype, buffer=raw, offset=int(rows[0]) * 8)
        steps = rows[1:] - rows[:-1]
        step = int(steps[0])
        if step >= layout.words and bool((steps == step).all()):  # evenly spaced: a view
            return np.ndarray(
                (m,), layout.dtype, buffer=raw, offset=int(rows[0]) * 8, strides=(step * 8,)
            )
        # scattered: gather only the 8-byte words holding fields we read
        gathered = words[rows[:, None] + layout.needed]
        return gathered.view(layout.compact).reshape(m)

    def _fill(self, family: int, recs: Any) -> np.ndarray:
        import numpy as np

        if family == API:
            return self._fill_api(recs)
        if family == MARKER:
            return self._fill_markers(recs)
        if family == MEMORY:
            return self._fill_memory(recs)
        m = len(recs)
        out = np.zeros((NUM_COLUMNS, m), dtype=np.int64)
        start = recs["start"].astype(np.int64)
        out[_C["start_ns"]] = start
        # Records CUPTI could not time carry 0 timestamps: never a negative duration.
        np.maximum(recs["end"].astype(np.int64) - start, 0, out=out[_C["duration_ns"]])
        out[_C["context"]] = recs["context_id"]
        out[_C["stream"]] = recs["stream_id"]
        out[_C["correlation"]] = recs["correlation_id"]
        if family == KERNEL:
            out[_C["kind"]] = RecordKind.KERNEL
            out[_C["device"]] = recs["device_id"]
            out[_C["name"]] = self._name_ids(recs["name"])
            for column, field in (
                ("grid_x", "grid_x"),
                ("grid_y", "grid_y"),
                ("grid_z", "grid_z"),
                ("block_x", "block_x"),
                ("block_y", "block_y"),
                ("block_z", "block_z"),
                ("registers", "registers_per_thread"),
                ("static_smem", "static_shared_memory"),
                ("dynamic_smem", "dynamic_shared_memory"),
            ):
                out[_C[column]] = recs[field]
        elif family == MEMSET:
            out[_C["kind"]] = RecordKind.MEMSET
            out[_C["device"]] = recs["device_id"]
            out[_C["bytes"]] = recs["bytes"]
            out[_C["src_kind"]] = recs["memory_kind"]
        elif family == SYNC:
            out[_C["kind"]] = RecordKind.SYNC
            out[_C["device"]] = self._devices_of_contexts(recs["context_id"])
            # stream_id is CUPTI_SYNCHRONIZATION_INVALID_VALUE (SYNC_NO_STREAM) for
            # context-wide synchronisation; kept as is.
            out[_C["sync_type"]] = recs["type"]
        else:  # MEMCPY, PEER_COPY
            out[_C["kind"]] = RecordKind.MEMCPY
            out[_C["bytes"]] = recs["bytes"]
            out[_C["copy_kind"]] = recs["copy_kind"]
            out[_C["src_kind"]] = recs["src_kind"]
            out[_C["dst_kind"]] = recs["dst_kind"]
            if family == PEER_COPY:
                out[_C["device"]] = recs["src_device_id"]
                out[_C["dst_device"]] = recs["dst_device_id"]
            else:
                out[_C["device"]] = recs["device_id"]
        return out

    def _devices_of_contexts(self, contexts: np.ndarray) -> np.ndarray:
        # CONTEXT records precede the SYNC records of their context (CUPTI emits one when
        # the context is created); an unseen context falls back to device 0.
        lookup = self.context_device.get
        import numpy as np

        return np.array([lookup(c, 0) for c in contexts.tolist()], dtype=np.int64)

    def _add_devices(self, recs: Any) -> None:
        infos = []
        for rec in recs:
            uuid = format_uuid(rec["uuid"].tobytes())
            ordinal = int(rec["id"])
            if (ordinal, uuid) in self._devices:
                continue
            self._devices.add((ordinal, uuid))
            name_ptr = int(rec["name"])
            infos.append(
                DeviceInfo(
                    ordinal=ordinal,
                    uuid=uuid,
                    name=ctypes.string_at(name_ptr).decode("utf-8", "replace") if name_ptr else "",
                    compute_capability_major=int(rec["compute_capability_major"]),
                    compute_capability_minor=int(rec["compute_capability_minor"]),
                    sm_count=int(rec["num_multiprocessors"]),
                    memory_bytes=int(rec["global_memory_size"]),
                )
            )
        if infos:
            self._sink.add_devices(infos)
