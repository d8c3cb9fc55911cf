"""The record vocabulary both sides share: record kinds, the column layout, devices.

Imported inside every traced process, so standard library only. ``COLUMNS`` mirrors the
``Records`` message of the tfprof.v1 wire (proto/src/tfprof/proto/collector.proto); the
collector stores and merges the same columns. ``tfprof.core.records`` offers all of it
beside ``RecordTable``.
"""

from __future__ import annotations

from enum import IntEnum
from typing import TypedDict


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


class DeviceInfo(TypedDict, total=False):
    ordinal: int
    uuid: str
    name: str
    pci_bus_id: str
    compute_capability_major: int
    compute_capability_minor: int
    sm_count: int
    memory_bytes: int
