"""Where each field of a cupti-python activity record sits: the struct layouts that
``cupti_records.RecordConverter`` decodes whole buffers with.

cupti-python names one class per record kind and struct version (ActivityKernel13,
ActivityMemcpy7, ...) and ships a numpy dtype for each struct. Layouts are discovered by
name, so a new struct version is decoded in bulk as soon as its dtype carries the fields
we read. numpy is imported inside functions: the agent never needs it at import time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

# Record families; each cupti-python class maps to one of them.
KERNEL, MEMCPY, PEER_COPY, MEMSET, DEVICE, CONTEXT, SYNC, API, MARKER, MEMORY = range(10)

# CamelCase stem of the cupti-python class -> (snake stem of its dtype, family).
CLASS_STEMS = {
    "Kernel": ("kernel", KERNEL),
    "Memcpy": ("memcpy", MEMCPY),
    "MemcpyPtoP": ("memcpy_pto_p", PEER_COPY),
    "Memset": ("memset", MEMSET),
    "Device": ("device", DEVICE),
    "Context": ("context", CONTEXT),
    "Synchronization": ("synchronization", SYNC),
    "API": ("api", API),  # one class for RUNTIME and DRIVER records
    "Marker": ("marker", MARKER),
    "Memory": ("memory", MEMORY),  # MEMORY2 records (ActivityMemory4)
}
# The first struct version of some classes has no number (ActivitySynchronization).
CLASS_RE = re.compile(
    r"^Activity(Kernel|MemcpyPtoP|Memcpy|Memset|Device|Context|Synchronization|API|Marker|Memory)"
    r"(\d*)$"
)

# Struct fields each family reads; a dtype lacking one is not used for bulk decoding.
FIELDS: dict[int, tuple[str, ...]] = {
    KERNEL: (
        "start", "end", "device_id", "context_id", "stream_id", "correlation_id", "name",
        "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z",
        "registers_per_thread", "static_shared_memory", "dynamic_shared_memory",
    ),
    MEMCPY: (
        "start", "end", "bytes", "copy_kind", "src_kind", "dst_kind",
        "device_id", "context_id", "stream_id", "correlation_id",
    ),
    PEER_COPY: (
        "start", "end", "bytes", "copy_kind", "src_kind", "dst_kind", "context_id",
        "stream_id", "correlation_id", "src_device_id", "dst_device_id",
    ),
    MEMSET: (
        "start", "end", "bytes", "memory_kind", "device_id", "context_id", "stream_id",
        "correlation_id",
    ),
    DEVICE: (
        "id", "uuid", "name", "compute_capability_major", "compute_capability_minor",
        "num_multiprocessors", "global_memory_size",
    ),
    CONTEXT: ("context_id", "device_id"),
    # No device field: the device comes from the context (CONTEXT records).
    SYNC: ("start", "end", "context_id", "stream_id", "correlation_id", "type"),
    API: ("kind", "cbid", "start", "end", "thread_id", "correlation_id", "return_value"),
    # object_id is a union: (process id, thread id) for a marker on a thread.
    MARKER: ("flags_", "timestamp", "id", "object_kind", "object_id", "name", "domain"),
    # The first MEMORY struct (start/end, no operation type) lacks these: not decoded.
    MEMORY: (
        "memory_operation_type", "memory_kind", "correlation_id", "address", "bytes",
        "timestamp", "device_id", "context_id", "stream_id",
    ),
}  # fmt: skip


@dataclass(frozen=True)
class Layout:
    cls: type
    family: int
    dtype: np.dtype[np.void]  # structured dtype of the C struct
    words: int  # struct size in 8-byte words
    needed: NDArray[np.int64]  # indices of the 8-byte words holding the fields we read
    compact: np.dtype[np.void]  # dtype of those words gathered side by side


def layout_of(cls: type, family: int, dtype: np.dtype[np.void]) -> Layout:
    import numpy

    fields = dtype.fields
    assert fields is not None  # discover_layouts passes structured dtypes only
    spans = {}
    for field in FIELDS[family]:
        fdtype, offset = fields[field][:2]
        spans[field] = (offset, fdtype, range(offset // 8, (offset + fdtype.itemsize - 1) // 8 + 1))
    needed = sorted({w for _, _, words in spans.values() for w in words})
    slot = {w: i for i, w in enumerate(needed)}
    compact = numpy.dtype(
        {
            "names": list(spans),
            "formats": [fdtype for _, fdtype, _ in spans.values()],
            "offsets": [slot[off // 8] * 8 + off % 8 for off, _, _ in spans.values()],
            "itemsize": 8 * len(needed),
        }
    )
    return Layout(cls, family, dtype, dtype.itemsize // 8, numpy.array(needed), compact)


def discover_layouts(cupti: ModuleType) -> list[Layout]:
    """Every record class of cupti-python we can decode in bulk, found by name."""
    layouts = []
    for attr in dir(cupti):
        match = CLASS_RE.match(attr)
        if not match:
            continue
        snake, family = CLASS_STEMS[match.group(1)]
        dtype = getattr(cupti, f"activity_{snake}{match.group(2)}_dtype", None)
        if dtype is None or dtype.names is None or dtype.itemsize % 8:
            continue
        if any(field not in dtype.names for field in FIELDS[family]):
            continue
        layouts.append(layout_of(getattr(cupti, attr), family, dtype))
    return layouts
