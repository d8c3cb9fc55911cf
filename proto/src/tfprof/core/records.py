"""The record vocabulary both sides share: record kinds, the column layout, devices.

Imported inside every traced process (the hook builds ``RecordTable`` batches), so
standard library only. ``COLUMNS`` mirrors the ``Records`` message of the tfprof.v1 wire
(proto/src/tfprof/proto/collector.proto); the collector stores and merges the same columns.
"""

from __future__ import annotations

import array
from collections.abc import Sequence
from enum import IntEnum
from typing import Any, TypedDict


class RecordKind(IntEnum):
    """Same values as ``tfprof.v1.RecordKind``."""

    KERNEL = 1
    MEMCPY = 2
    MEMSET = 3
    SYNC = 4  # CUPTI SYNCHRONIZATION: a host wait; ``sync_type`` says which kind
    API = 5  # a CUDA runtime or driver API call on a host thread (``cbid``, ``return_value``)
    MARKER = 6  # a host range: NVTX, framework op, user annotation (``category`` says which)
    MEMORY = 7  # a device allocation or free (CUPTI MEMORY2): ``memory_op``, ``address``
    STEP = 8  # a training step the hook marked (no code change): ``external_id`` its number


# CUPTI_SYNCHRONIZATION_INVALID_VALUE: the stream of a context-wide synchronisation.
SYNC_NO_STREAM = 0xFFFFFFFF


COLUMNS: tuple[str, ...] = (
    "kind",
    "start_ns",
    "duration_ns",
    "device",
    "context",
    "stream",
    "correlation",
    "name",
    "grid_x",
    "grid_y",
    "grid_z",
    "block_x",
    "block_y",
    "block_z",
    "registers",
    "static_smem",
    "dynamic_smem",
    "bytes",
    "copy_kind",
    "src_kind",
    "dst_kind",
    "dst_device",
    "sync_type",
    # Host side (API, MARKER, MEMORY records; zero for GPU activity).
    "thread",  # OS thread id of the host thread that made the call / opened the range
    "cbid",  # API: CUPTI callback id (CUpti_runtime_api_trace_cbid / driver cbid)
    "return_value",  # API: CUresult / cudaError_t the call returned
    "external_id",  # framework correlation (Kineto "External id", NVTX range id); 0 = none
    "address",  # MEMORY: device address of the block
    "memory_op",  # MEMORY: CUpti_ActivityMemoryOperationType (1 allocation, 2 release)
    "category",  # API: 1 runtime, 2 driver; MARKER: string-table index of its domain
    # KERNEL, MARKER: string-table index of the collective it runs or issued (Kineto's
    # collective args as canonical JSON, tfprof.core.collectives); 0 = none.
    "collective",
)
COLUMN_INDEX = {name: i for i, name in enumerate(COLUMNS)}
NUM_COLUMNS = len(COLUMNS)
# GPU activity rows end with the host-side columns, all zero.
_HOST_ZEROS = (0,) * (NUM_COLUMNS - COLUMN_INDEX["thread"])


class DeviceInfo(TypedDict, total=False):
    ordinal: int
    uuid: str
    name: str
    pci_bus_id: str
    compute_capability_major: int
    compute_capability_minor: int
    sm_count: int
    memory_bytes: int


class RecordTable:
    """A columnar batch of GPU activity and host records, one int64 array per column.

    Sources either append record by record (``add_kernel`` and friends) or hand whole
    columns, in ``COLUMNS`` order, to the constructor (numpy arrays decoded from CUPTI
    buffers, replay chunks); ``from_columns`` takes them by name and zero-fills the rest.
    """

    __slots__ = ("columns",)

    def __init__(self, columns: Sequence[Any] | None = None) -> None:
        if columns is None:
            self.columns: list[Any] = [array.array("q") for _ in COLUMNS]
        else:
            if len(columns) != NUM_COLUMNS:
                raise ValueError(f"expected {NUM_COLUMNS} columns, got {len(columns)}")
            self.columns = list(columns)

    @classmethod
    def from_columns(cls, columns: dict[str, Any], length: int) -> RecordTable:
        """Columns by name (int64 buffers); missing columns are zero."""
        unknown = set(columns) - set(COLUMNS)
        if unknown:
            raise ValueError(f"unknown columns: {sorted(unknown)}")
        zeros = array.array("q", bytes(8 * length))
        cols = [columns.get(name, zeros) for name in COLUMNS]
        for name, col in zip(COLUMNS, cols):
            if len(col) != length:
                raise ValueError(f"column {name} has {len(col)} values, expected {length}")
        return cls(cols)

    def __len__(self) -> int:
        return len(self.columns[0])

    def append(self, values: Sequence[int]) -> None:
        if len(values) != len(self.columns):
            raise ValueError(f"{len(values)} values for {len(self.columns)} columns")
        for col, value in zip(self.columns, values):
            col.append(value)

    def add_kernel(
        self,
        *,
        start_ns: int,
        end_ns: int,
        device: int,
        stream: int,
        name: int,
        context: int = 0,
        correlation: int = 0,
        grid: tuple[int, int, int] = (0, 0, 0),
        block: tuple[int, int, int] = (0, 0, 0),
        registers: int = 0,
        static_smem: int = 0,
        dynamic_smem: int = 0,
    ) -> None:
        self.append(
            (
                RecordKind.KERNEL,
                start_ns,
                end_ns - start_ns,
                device,
                context,
                stream,
                correlation,
                name,
                *grid,
                *block,
                registers,
                static_smem,
                dynamic_smem,
                0,
                0,
                0,
                0,
                0,
                0,
                *_HOST_ZEROS,
            )
        )

    def add_memcpy(
        self,
        *,
        start_ns: int,
        end_ns: int,
        device: int,
        stream: int,
        nbytes: int,
        copy_kind: int,
        src_kind: int = 0,
        dst_kind: int = 0,
        context: int = 0,
        correlation: int = 0,
        dst_device: int = 0,
        name: int = 0,
    ) -> None:
        self.append(
            (
                RecordKind.MEMCPY,
                start_ns,
                end_ns - start_ns,
                device,
                context,
                stream,
                correlation,
                name,
                0, 0, 0, 0, 0, 0, 0, 0, 0,
                nbytes,
                copy_kind,
                src_kind,
                dst_kind,
                dst_device,
                0,
                *_HOST_ZEROS,
            )
        )  # fmt: skip

    def add_memset(
        self,
        *,
        start_ns: int,
        end_ns: int,
        device: int,
        stream: int,
        nbytes: int,
        memory_kind: int = 0,
        context: int = 0,
        correlation: int = 0,
        name: int = 0,
    ) -> None:
        self.append(
            (
                RecordKind.MEMSET,
                start_ns,
                end_ns - start_ns,
                device,
                context,
                stream,
                correlation,
                name,
                0, 0, 0, 0, 0, 0, 0, 0, 0,
                nbytes,
                0,
                memory_kind,
                0,
                0,
                0,
                *_HOST_ZEROS,
            )
        )  # fmt: skip

    def add_sync(
        self,
        *,
        start_ns: int,
        end_ns: int,
        device: int,
        stream: int,
        sync_type: int,
        context: int = 0,
        correlation: int = 0,
        name: int = 0,
    ) -> None:
        """A host wait; ``stream`` is ``SYNC_NO_STREAM`` for a context-wide one."""
        self.append(
            (
                RecordKind.SYNC,
                start_ns,
                end_ns - start_ns,
                device,
                context,
                stream,
                correlation,
                name,
                0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                sync_type,
                *_HOST_ZEROS,
            )
        )  # fmt: skip

    def add_api(
        self,
        *,
        start_ns: int,
        end_ns: int,
        thread: int,
        cbid: int,
        category: int,
        name: int,
        correlation: int = 0,
        return_value: int = 0,
        device: int = 0,
        context: int = 0,
    ) -> None:
        """A CUDA API call on a host thread; ``category`` 1 runtime, 2 driver
        (``cupti_labels.API_CATEGORIES``)."""
        self.append(
            (
                RecordKind.API,
                start_ns,
                end_ns - start_ns,
                device,
                context,
                0,
                correlation,
                name,
                0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                thread,
                cbid,
                return_value,
                0,
                0,
                0,
                category,
                0,
            )
        )  # fmt: skip

    def add_marker(
        self,
        *,
        start_ns: int,
        end_ns: int,
        thread: int,
        name: int,
        category: int = 0,
        external_id: int = 0,
        collective: int = 0,
    ) -> None:
        """A host range (NVTX, framework op); ``category`` is the string-table index of
        its domain, ``external_id`` its range id, ``collective`` that of the collective's
        arguments it issued. An instant has ``end_ns == start_ns``."""
        self.append(
            (
                RecordKind.MARKER,
                start_ns,
                end_ns - start_ns,
                0,
                0,
                0,
                0,
                name,
                0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                thread,
                0,
                0,
                external_id,
                0,
                0,
                category,
                collective,
            )
        )  # fmt: skip

    def add_memory(
        self,
        *,
        timestamp_ns: int,
        device: int,
        nbytes: int,
        address: int,
        memory_op: int,
        memory_kind: int = 0,
        context: int = 0,
        stream: int = 0,
        correlation: int = 0,
        thread: int = 0,
    ) -> None:
        """A device allocation (``memory_op`` 1) or release (2) at one instant;
        ``memory_kind`` (``cupti_labels.MEMORY_KINDS``) goes in ``src_kind``."""
        self.append(
            (
                RecordKind.MEMORY,
                timestamp_ns,
                0,
                device,
                context,
                stream,
                correlation,
                0,
                0, 0, 0, 0, 0, 0, 0, 0, 0,
                nbytes,
                0,
                memory_kind,
                0,
                0,
                0,
                thread,
                0,
                0,
                0,
                address,
                memory_op,
                0,
                0,
            )
        )  # fmt: skip

    def add_step(self, *, start_ns: int, end_ns: int, thread: int, step: int, name: int) -> None:
        """A training step of the process: number ``step`` ran from ``start_ns`` to
        ``end_ns`` on ``thread``; ``name`` is the string-table index of what marked it
        (``step_markers``). The number travels in ``external_id``."""
        self.append(
            (
                RecordKind.STEP,
                start_ns,
                end_ns - start_ns,
                0, 0, 0, 0,
                name,
                0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                thread,
                0,
                0,
                step,
                0,
                0,
                0,
                0,
            )
        )  # fmt: skip

    def column(self, name: str) -> Any:
        return self.columns[COLUMN_INDEX[name]]
