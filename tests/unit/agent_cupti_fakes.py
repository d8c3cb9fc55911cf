"""Test doubles and genuine cupti-python records for the CUPTI source's tests.

cupti-python's ``Activity*`` classes construct and fill without a driver, so the tests
drive the source and its decoder with the very objects CUPTI hands the callback. Only
the sink is a test double (of our own ``Sink`` protocol).
"""

from __future__ import annotations

import ctypes
from typing import Any

from cupti import cupti

from tfprof.agent.inprocess.frames import StringTable
from tfprof.agent.inprocess.sources.cupti import CuptiSource
from tfprof.core.records import COLUMNS, DeviceInfo, RecordTable

AK = cupti.ActivityKind
SYNC_TYPE = cupti.ActivitySynchronizationType
T0 = 1_763_000_000_000_000_000


class RecordingSink:
    def __init__(self, fail_submit: bool = False) -> None:
        self.strings = StringTable()
        self.interned: list[str] = []
        self.tables: list[RecordTable] = []
        self.devices: list[DeviceInfo] = []
        self.dropped = 0
        self.warnings: list[str] = []
        self.waits: list[bool] = []
        self.fail_submit = fail_submit

    def intern(self, name: str) -> int:
        self.interned.append(name)
        return self.strings.intern(name)

    def submit(self, table: RecordTable, wait: bool = False) -> bool:
        if self.fail_submit:
            raise RuntimeError("queue exploded")
        self.waits.append(wait)
        self.tables.append(table)
        return True

    def add_devices(self, devices: list[DeviceInfo]) -> None:
        self.devices.extend(devices)

    def add_tracer_dropped(self, count: int) -> None:
        self.dropped += count

    def warn(self, message: str) -> None:
        self.warnings.append(message)

    def stack_sink(self) -> None:
        return None  # --code off: the CUPTI source hands over no stacks

    def name(self, index: int) -> str:
        return self.strings._strings[index]

    def rows(self) -> list[dict[str, int]]:
        """All submitted records as dicts, sorted by start time."""
        out: list[dict[str, int]] = []
        for table in self.tables:
            cols = [[int(v) for v in table.column(name)] for name in COLUMNS]
            out.extend(
                dict(zip(COLUMNS, values, strict=True)) for values in zip(*cols, strict=True)
            )
        return sorted(out, key=lambda r: (r["start_ns"], r["kind"]))


def classes(stem: str) -> list[Any]:
    """Every struct version of a record class this cupti-python ships, e.g. Kernel9..13."""
    found = []
    for attr in dir(cupti):
        rest = attr[len(f"Activity{stem}") :]
        if attr.startswith(f"Activity{stem}") and rest.isdigit():
            found.append(getattr(cupti, attr))
    assert found, stem
    return found


def ids(classes_: list[Any]) -> list[str]:
    return [c.__name__ for c in classes_]


def bound_source(sink: RecordingSink) -> CuptiSource:
    source = CuptiSource()
    source.bind(sink)
    return source


def fill_kernel(rec: Any, i: int = 0, name: str | None = "kern") -> Any:
    rec.kind = int(AK.CONCURRENT_KERNEL)
    rec.start = T0 + 1000 * i
    rec.end = T0 + 1000 * i + 250 + i
    rec.device_id = 3
    rec.context_id = 5
    rec.stream_id = 13 + i
    rec.correlation_id = 900 + i
    rec.grid_x, rec.grid_y, rec.grid_z = 120 + i, 4, 2
    rec.block_x, rec.block_y, rec.block_z = 256, 2, 1
    rec.registers_per_thread = 96
    rec.static_shared_memory = 2048
    rec.dynamic_shared_memory = 65536
    if name is not None:
        rec.name = name
    return rec


def fill_memcpy(rec: Any, i: int = 0) -> Any:
    rec.kind = int(AK.MEMCPY)
    rec.start = T0 + 1000 * i + 10
    rec.end = T0 + 1000 * i + 510
    rec.bytes = (1 << 33) + i  # over 4 GiB: must not be truncated
    rec.copy_kind = int(cupti.ActivityMemcpyKind.HTOD)
    rec.src_kind = int(cupti.ActivityMemoryKind.PINNED)
    rec.dst_kind = int(cupti.ActivityMemoryKind.DEVICE)
    rec.device_id = 2
    rec.context_id = 6
    rec.stream_id = 21
    rec.correlation_id = 700 + i
    return rec


def fill_peer(rec: Any, i: int = 0) -> Any:
    rec.kind = int(AK.MEMCPY2)
    rec.start = T0 + 1000 * i + 20
    rec.end = T0 + 1000 * i + 820
    rec.bytes = 1 << 20
    rec.copy_kind = int(cupti.ActivityMemcpyKind.PTOP)
    rec.src_kind = int(cupti.ActivityMemoryKind.DEVICE)
    rec.dst_kind = int(cupti.ActivityMemoryKind.DEVICE)
    rec.device_id = 0
    rec.src_device_id = 1
    rec.dst_device_id = 4
    rec.context_id = 7
    rec.stream_id = 31
    rec.correlation_id = 600 + i
    return rec


def fill_memset(rec: Any, i: int = 0) -> Any:
    rec.kind = int(AK.MEMSET)
    rec.start = T0 + 1000 * i + 30
    rec.end = T0 + 1000 * i + 130
    rec.bytes = 12345
    rec.memory_kind = int(cupti.ActivityMemoryKind.DEVICE)
    rec.value = 0
    rec.device_id = 1
    rec.context_id = 8
    rec.stream_id = 41
    rec.correlation_id = 500 + i
    return rec


UUID = bytes.fromhex("e3c1f2a47b9d4c0e8a1b2c3d4e5f6071")


def fill_device(rec: Any, ordinal: int = 0, uuid: bytes = UUID) -> Any:
    rec.kind = int(AK.DEVICE)
    rec.id = ordinal
    rec.name = "NVIDIA H100 80GB HBM3"
    rec.compute_capability_major = 9
    rec.compute_capability_minor = 0
    rec.num_multiprocessors = 132
    rec.global_memory_size = 85_520_809_984
    # The uuid attribute is read-only: fill the struct's bytes where its dtype says.
    dtype = getattr(cupti, f"activity_device{type(rec).__name__[len('ActivityDevice') :]}_dtype")
    ctypes.memmove(rec.ptr + dtype.fields["uuid"][1], uuid, 16)
    return rec


def fill_sync(rec: Any, i: int = 0, stream: int = 21, sync_type: Any = None) -> Any:
    rec.kind = int(AK.SYNCHRONIZATION)
    rec.type = int(SYNC_TYPE.STREAM_SYNCHRONIZE if sync_type is None else sync_type)
    rec.start = T0 + 1000 * i + 40
    rec.end = T0 + 1000 * i + 940
    rec.context_id = 11
    rec.stream_id = stream
    rec.correlation_id = 300 + i
    rec.cuda_event_id = 0
    return rec


def context_record(context: int = 11, device: int = 2) -> Any:
    rec = cupti.ActivityContext4()
    rec.kind = int(AK.CONTEXT)
    rec.context_id = context
    rec.device_id = device
    return rec


class PackedBuffer:
    """Records laid out in one block of memory: back to back by default, as in CUPTI's
    own buffer; ``gaps`` (bytes before each record) mimic cupti-python's per-record
    heap copies, which sit one malloc chunk apart."""

    def __init__(self, classes_: list[Any], gaps: list[int] | None = None) -> None:
        sizes = [self.dtype(c).itemsize for c in classes_]
        gaps = gaps or [0] * len(classes_)
        self.memory = ctypes.create_string_buffer(sum(sizes) + sum(gaps) + 8)
        base, offset = ctypes.addressof(self.memory), 0
        self.records = []
        for cls, size, gap in zip(classes_, sizes, gaps, strict=True):
            offset += gap
            self.records.append(cls.from_ptr(base + offset, owner=self.memory))
            offset += size

    @staticmethod
    def dtype(cls: type) -> Any:
        stem = cls.__name__[len("Activity") :].replace("API", "Api")
        snake = "".join(f"_{ch.lower()}" if ch.isupper() else ch for ch in stem).lstrip("_")
        return getattr(cupti, f"activity_{snake}_dtype")


def shared_name_pointer(rec: Any, buffer: Any) -> None:
    """Point the record's name at ``buffer``, as CUPTI shares one string per kernel."""
    offset = PackedBuffer.dtype(type(rec)).fields["name"][1]
    ctypes.c_int64.from_address(rec.ptr + offset).value = ctypes.addressof(buffer)


def fill_api(rec: Any, i: int = 0, cbid: int | None = None, driver: bool = False) -> Any:
    """A runtime (or driver) API record: cudaLaunchKernel (cuLaunchKernel) by default."""
    rec.kind = int(AK.DRIVER if driver else AK.RUNTIME)
    if cbid is None:
        enum = cupti.DriverApiTraceCbid if driver else cupti.RuntimeApiTraceCbid
        cbid = int(enum.cuLaunchKernel if driver else enum.cudaLaunchKernel_v7000)
    rec.cbid = cbid
    rec.start = T0 + 1000 * i + 5
    rec.end = T0 + 1000 * i + 9
    rec.process_id = 4242
    rec.thread_id = 31337 + i % 2
    rec.correlation_id = 900 + i
    rec.return_value = 0
    return rec


def fill_marker(
    rec: Any,
    marker_id: int,
    flags: int,
    ts: int,
    name: str | None = None,
    domain: str | None = None,
    thread: int = 31337,
) -> Any:
    """An NVTX marker record on a host thread (ActivityMarker2)."""
    rec.kind = int(AK.MARKER)
    rec.flags_ = flags
    rec.timestamp = ts
    rec.id = marker_id
    rec.object_kind = int(cupti.ActivityObjectKind.THREAD)
    rec.object_id.pt.process_id = 4242
    rec.object_id.pt.thread_id = thread
    if name is not None:
        rec.name = name
    if domain is not None:
        rec.domain = domain
    return rec


def fill_memory(rec: Any, i: int = 0, release: bool = False, nbytes: int = 1 << 30) -> Any:
    """A MEMORY2 allocation (or release) record (ActivityMemory4)."""
    rec.kind = int(AK.MEMORY2)
    op = cupti.ActivityMemoryOperationType
    rec.memory_operation_type = int(op.RELEASE if release else op.ALLOCATION)
    rec.memory_kind = int(cupti.ActivityMemoryKind.DEVICE)
    rec.correlation_id = 800 + i
    rec.address = 0x7F00_0000_0000 + (i << 32)
    rec.bytes = nbytes
    rec.timestamp = T0 + 1000 * i + 60
    rec.process_id = 4242
    rec.device_id = 2
    rec.context_id = 11
    rec.stream_id = 7
    return rec
