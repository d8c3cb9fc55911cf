"""The attribute path of the CUPTI record converter: records read field by field.

For record classes without a usable numpy dtype (a future struct version), and the
benchmark's baseline (``convert_by_attributes``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tfprof.agent.inprocess.sources.cupti_layouts import (
    API,
    CONTEXT,
    KERNEL,
    MARKER,
    MEMCPY,
    MEMORY,
    MEMSET,
    PEER_COPY,
    SYNC,
)
from tfprof.agent.inprocess.sources.cupti_markers import OBJECT_THREAD
from tfprof.core.cupti_labels import API_DRIVER, API_RUNTIME
from tfprof.core.records import NUM_COLUMNS, RecordTable

if TYPE_CHECKING:
    import numpy as np
from tfprof.agent.inprocess.sources.cupti_host_rows import HostRows


class AttributeRows(HostRows):
    """The attribute half of ``RecordConverter``, which sets the state declared here."""

    _family_of_kind: dict[int, int]
    context_device: dict[int, int]

    def convert_by_attributes(self, activities: Sequence[Any]) -> RecordTable | None:
        rows = self._convert_by_attributes(activities)
        return RecordTable(list(rows)) if rows.shape[1] else None

    def _convert_by_attributes(self, activities: Sequence[Any]) -> np.ndarray:
        import numpy as np

        table = RecordTable()
        family_of_kind = self._family_of_kind
        names = self._names
        markers: list[tuple[int, int, int, int, str, str]] = []
        for rec in activities:
            family = family_of_kind.get(rec.kind)
            if family == KERNEL:
                raw = rec.name.encode()
                name = names.get(raw)
                if name is None:
                    name = names[raw] = self._sink.intern(rec.name)
                table.add_kernel(
                    start_ns=rec.start,
                    end_ns=max(rec.end, rec.start),
                    device=rec.device_id,
                    context=rec.context_id,
                    stream=rec.stream_id,
                    correlation=rec.correlation_id,
                    name=name,
                    grid=(rec.grid_x, rec.grid_y, rec.grid_z),
                    block=(rec.block_x, rec.block_y, rec.block_z),
                    registers=rec.registers_per_thread,
                    static_smem=rec.static_shared_memory,
                    dynamic_smem=rec.dynamic_shared_memory,
                )
            elif family in (MEMCPY, PEER_COPY):
                peer = family == PEER_COPY
                table.add_memcpy(
                    start_ns=rec.start,
                    end_ns=max(rec.end, rec.start),
                    device=rec.src_device_id if peer else rec.device_id,
                    dst_device=rec.dst_device_id if peer else 0,
                    context=rec.context_id,
                    stream=rec.stream_id,
                    correlation=rec.correlation_id,
                    nbytes=rec.bytes,
                    copy_kind=rec.copy_kind,
                    src_kind=rec.src_kind,
                    dst_kind=rec.dst_kind,
                )
            elif family == MEMSET:
                table.add_memset(
                    start_ns=rec.start,
                    end_ns=max(rec.end, rec.start),
                    device=rec.device_id,
                    context=rec.context_id,
                    stream=rec.stream_id,
                    correlation=rec.correlation_id,
                    nbytes=rec.bytes,
                    memory_kind=rec.memory_kind,
                )
            elif family == SYNC:
                table.add_sync(
                    start_ns=rec.start,
                    end_ns=max(rec.end, rec.start),
                    device=self.context_device.get(rec.context_id, 0),
                    context=rec.context_id,
                    stream=rec.stream_id,
                    correlation=rec.correlation_id,
                    sync_type=int(rec.type),
                )
            elif family == CONTEXT:
                self.context_device[rec.context_id] = rec.device_id
            elif family == API:
                category = API_RUNTIME if rec.kind == self._runtime_kind else API_DRIVER
                table.add_api(
                    start_ns=rec.start,
                    end_ns=max(rec.end, rec.start),
                    thread=rec.thread_id,
                    cbid=rec.cbid,
                    category=category,
                    name=self._api_name_id(category << 32 | rec.cbid),
                    correlation=rec.correlation_id,
                    return_value=rec.return_value,
                )
            elif family == MARKER:
                on_thread = rec.object_kind == OBJECT_THREAD
                thread = rec.object_id.pt.thread_id if on_thread else 0
                markers.append((rec.flags_, rec.timestamp, rec.id, thread, rec.name, rec.domain))
            elif family == MEMORY and hasattr(rec, "memory_operation_type"):
                address = rec.address
                table.add_memory(
                    timestamp_ns=rec.timestamp,
                    device=rec.device_id,
                    nbytes=rec.bytes,
                    address=address - (1 << 64) if address >> 63 else address,  # as int64
                    memory_op=rec.memory_operation_type,
                    memory_kind=rec.memory_kind,
                    context=rec.context_id,
                    stream=rec.stream_id,
                    correlation=rec.correlation_id,
                )
            # DEVICE records of an unknown struct version and other kinds: ignored.
        n = len(table)
        rows = np.zeros((NUM_COLUMNS, n), dtype=np.int64)
        if n:
            for i, col in enumerate(table.columns):
                rows[i] = np.frombuffer(col, dtype=np.int64, count=n)
        if markers:
            text = self._intern_text  # names come as str here, not pointers
            ranges = self._marker_rows(self.markers.add(markers, text, text))
            rows = np.concatenate((rows, ranges), axis=1)
        return rows
