"""The CUPTI source, driven with genuine cupti-python record objects.

cupti-python's ``Activity*`` classes construct and fill without a driver, so the buffer
callback is tested on the very objects CUPTI hands it. Only the sink is a test double
(of our own ``Sink`` protocol). The GPU test at the end runs where a driver is present.
"""

from __future__ import annotations

import ctypes
import sys
import time
from typing import Any

import pytest
from cupti import cupti

from tfprof.agent.frames import StringTable
from tfprof.agent.sources.base import SourceUnavailable
from tfprof.agent.sources.cupti import NOT_INSTALLED, CuptiSource
from tfprof.agent.sources.cupti_errors import driver_cuda_version
from tfprof.agent.sources.cupti_records import format_uuid
from tfprof.core.records import COLUMNS, DeviceInfo, RecordKind, RecordTable

AK = cupti.ActivityKind
HAVE_DRIVER = driver_cuda_version() is not None
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


KERNEL_EXPECTED = {
    "kind": RecordKind.KERNEL,
    "start_ns": T0,
    "duration_ns": 250,
    "device": 3,
    "context": 5,
    "stream": 13,
    "correlation": 900,
    "grid_x": 120,
    "grid_y": 4,
    "grid_z": 2,
    "block_x": 256,
    "block_y": 2,
    "block_z": 1,
    "registers": 96,
    "static_smem": 2048,
    "dynamic_smem": 65536,
    "bytes": 0,
    "copy_kind": 0,
    "src_kind": 0,
    "dst_kind": 0,
    "dst_device": 0,
    "sync_type": 0,
}
MEMCPY_EXPECTED = {
    "kind": RecordKind.MEMCPY,
    "start_ns": T0 + 10,
    "duration_ns": 500,
    "device": 2,
    "context": 6,
    "stream": 21,
    "correlation": 700,
    "name": 0,
    **dict.fromkeys(
        ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers"), 0
    ),
    "static_smem": 0,
    "dynamic_smem": 0,
    "bytes": 1 << 33,
    "copy_kind": 1,  # HtoD
    "src_kind": 2,  # pinned
    "dst_kind": 3,  # device
    "dst_device": 0,
    "sync_type": 0,
}
PEER_EXPECTED = {
    **MEMCPY_EXPECTED,
    "start_ns": T0 + 20,
    "duration_ns": 800,
    "device": 1,  # the source device
    "dst_device": 4,
    "context": 7,
    "stream": 31,
    "correlation": 600,
    "bytes": 1 << 20,
    "copy_kind": 10,  # PtoP
    "src_kind": 3,
    "dst_kind": 3,
}
MEMSET_EXPECTED = {
    **dict.fromkeys(COLUMNS, 0),
    "kind": RecordKind.MEMSET,
    "start_ns": T0 + 30,
    "duration_ns": 100,
    "device": 1,
    "context": 8,
    "stream": 41,
    "correlation": 500,
    "bytes": 12345,
    "src_kind": 3,  # the memory kind
}


@pytest.mark.parametrize("cls", classes("Kernel"), ids=ids(classes("Kernel")))
def test_kernel_record_fills_every_column(cls: type) -> None:
    sink = RecordingSink()
    rec = fill_kernel(cls(), name="_Z6vecAddPKfS0_Pfi")
    bound_source(sink).buffer_completed([rec])

    (row,) = sink.rows()
    assert row == {**KERNEL_EXPECTED, "name": row["name"]}
    assert sink.name(row["name"]) == "_Z6vecAddPKfS0_Pfi"
    assert sink.waits == [False]  # the callback never waits for room
    assert sink.dropped == 0 and sink.warnings == []


@pytest.mark.parametrize("cls", classes("Memcpy"), ids=ids(classes("Memcpy")))
def test_memcpy_record(cls: type) -> None:
    sink = RecordingSink()
    bound_source(sink).buffer_completed([fill_memcpy(cls())])
    assert sink.rows() == [MEMCPY_EXPECTED]


@pytest.mark.parametrize("cls", classes("MemcpyPtoP"), ids=ids(classes("MemcpyPtoP")))
def test_peer_copy_puts_source_device_in_device_and_destination_in_dst_device(
    cls: type,
) -> None:
    sink = RecordingSink()
    bound_source(sink).buffer_completed([fill_peer(cls())])
    assert sink.rows() == [PEER_EXPECTED]


@pytest.mark.parametrize("cls", classes("Memset"), ids=ids(classes("Memset")))
def test_memset_record_puts_memory_kind_in_src_kind(cls: type) -> None:
    sink = RecordingSink()
    bound_source(sink).buffer_completed([fill_memset(cls())])
    assert sink.rows() == [MEMSET_EXPECTED]


@pytest.mark.parametrize("cls", classes("Device"), ids=ids(classes("Device")))
def test_device_record_becomes_device_info(cls: type) -> None:
    sink = RecordingSink()
    source = bound_source(sink)
    rec = fill_device(cls())
    assert rec.uuid.bytes == UUID  # the genuine object reads back what we wrote

    source.buffer_completed([rec])
    source.buffer_completed([rec])  # CUPTI may repeat it; report once

    assert sink.devices == [
        {
            "ordinal": 0,
            "uuid": "GPU-e3c1f2a4-7b9d-4c0e-8a1b-2c3d4e5f6071",
            "name": "NVIDIA H100 80GB HBM3",
            "compute_capability_major": 9,
            "compute_capability_minor": 0,
            "sm_count": 132,
            "memory_bytes": 85_520_809_984,
        }
    ]
    assert sink.tables == []  # device records are not activity rows


def test_uuid_is_formatted_like_nvidia_smi() -> None:
    assert format_uuid(bytes(range(16))) == "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f"


@pytest.mark.parametrize("cls", classes("Context"), ids=ids(classes("Context")))
def test_context_record_maps_context_to_device(cls: type) -> None:
    sink = RecordingSink()
    source = bound_source(sink)
    rec = cls()
    rec.kind = int(AK.CONTEXT)
    rec.context_id = 11
    rec.device_id = 2
    source.buffer_completed([rec])
    assert source.converter is not None
    assert source.converter.context_device == {11: 2}
    assert sink.tables == []


def test_scattered_mixed_buffer_converts_every_record() -> None:
    sink = RecordingSink()
    recs = [
        fill_kernel(cupti.ActivityKernel11(), 0, name="k0"),
        fill_memcpy(cupti.ActivityMemcpy6(), 1),
        fill_kernel(cupti.ActivityKernel13(), 2, name="k2"),
        fill_memset(cupti.ActivityMemset5(), 3),
        fill_peer(cupti.ActivityMemcpyPtoP4(), 4),
        fill_device(cupti.ActivityDevice6(), ordinal=1),
    ]
    bound_source(sink).buffer_completed(recs)

    assert len(sink.tables) == 1  # one submit per buffer
    rows = sink.rows()
    assert [r["kind"] for r in rows] == [1, 2, 1, 3, 2]
    assert [r["correlation"] for r in rows] == [900, 701, 902, 503, 604]
    assert [sink.name(r["name"]) for r in rows] == ["k0", "", "k2", "", ""]
    assert [d["ordinal"] for d in sink.devices] == [1]


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
        stem = cls.__name__[len("Activity") :]
        snake = "".join(f"_{ch.lower()}" if ch.isupper() else ch for ch in stem).lstrip("_")
        return getattr(cupti, f"activity_{snake}_dtype")


def shared_name_pointer(rec: Any, buffer: Any) -> None:
    """Point the record's name at ``buffer``, as CUPTI shares one string per kernel."""
    offset = PackedBuffer.dtype(type(rec)).fields["name"][1]
    ctypes.c_int64.from_address(rec.ptr + offset).value = ctypes.addressof(buffer)


def test_packed_buffer_of_one_kind_is_decoded_in_place() -> None:
    sink = RecordingSink()
    buf = PackedBuffer([cupti.ActivityKernel11] * 5)
    names = [ctypes.create_string_buffer(b"gemm"), ctypes.create_string_buffer(b"relu")]
    for i, rec in enumerate(buf.records):
        fill_kernel(rec, i, name=None)
        shared_name_pointer(rec, names[i % 2])

    bound_source(sink).buffer_completed(buf.records)

    rows = sink.rows()
    assert [r["stream"] for r in rows] == [13, 14, 15, 16, 17]
    assert [r["duration_ns"] for r in rows] == [250, 251, 252, 253, 254]
    assert [sink.name(r["name"]) for r in rows] == ["gemm", "relu", "gemm", "relu", "gemm"]
    assert sorted(sink.interned) == ["gemm", "relu"]  # once per distinct kernel


def test_packed_mixed_buffer_matches_the_attribute_path() -> None:
    layout = [
        cupti.ActivityKernel11,
        cupti.ActivityMemcpy6,
        cupti.ActivityKernel11,
        cupti.ActivityMemset5,
        cupti.ActivityDevice6,
        cupti.ActivityKernel11,
        cupti.ActivityMemcpyPtoP4,
        cupti.ActivityContext4,
        cupti.ActivityMemcpy6,
    ]
    buf = PackedBuffer(layout)
    name = ctypes.create_string_buffer(b"_Z4gemmv")
    for i, rec in enumerate(buf.records):
        if isinstance(rec, cupti.ActivityKernel11):
            fill_kernel(rec, i, name=None)
            shared_name_pointer(rec, name)
        elif isinstance(rec, cupti.ActivityMemcpy6):
            fill_memcpy(rec, i)
        elif isinstance(rec, cupti.ActivityMemset5):
            fill_memset(rec, i)
        elif isinstance(rec, cupti.ActivityMemcpyPtoP4):
            fill_peer(rec, i)
        elif isinstance(rec, cupti.ActivityDevice6):
            fill_device(rec)
        else:
            rec.kind, rec.context_id, rec.device_id = int(AK.CONTEXT), 5, 3

    bulk_sink, attr_sink = RecordingSink(), RecordingSink()
    source = bound_source(bulk_sink)
    source.buffer_completed(buf.records)
    attr_source = bound_source(attr_sink)
    assert attr_source.converter is not None
    table = attr_source.converter.convert_by_attributes(buf.records)
    assert table is not None
    attr_sink.tables.append(table)

    rows = bulk_sink.rows()
    assert len(rows) == 7
    assert [r["correlation"] for r in rows] == [900, 701, 902, 503, 905, 606, 708]
    assert rows == attr_sink.rows()
    assert rows[0] == {**KERNEL_EXPECTED, "name": rows[0]["name"]}
    assert rows[1] == {**MEMCPY_EXPECTED, "start_ns": T0 + 1010, "bytes": (1 << 33) + 1,
                       "correlation": 701}  # fmt: skip
    assert bulk_sink.name(rows[0]["name"]) == "_Z4gemmv"
    assert [d["uuid"] for d in bulk_sink.devices] == ["GPU-e3c1f2a4-7b9d-4c0e-8a1b-2c3d4e5f6071"]
    assert source.converter is not None and source.converter.context_device == {5: 3}


@pytest.mark.parametrize(
    "gaps",
    [
        [0, 8, 8, 8, 8],  # malloc-chunk neighbours: one copy
        [0, 8, 5000, 16, 9000],  # gaps of a page or more: separate copies
        [4, 4, 4, 4, 4],  # unaligned structs: copied one by one
    ],
    ids=["chunks", "far-apart", "unaligned"],
)
def test_heap_layouts_decode_the_same(gaps: list[int]) -> None:
    buf = PackedBuffer([cupti.ActivityKernel13, cupti.ActivityMemcpy7] * 2
                       + [cupti.ActivityKernel13], gaps)  # fmt: skip
    name = ctypes.create_string_buffer(b"k")
    for i, rec in enumerate(buf.records):
        if isinstance(rec, cupti.ActivityKernel13):
            fill_kernel(rec, i, name=None)
            shared_name_pointer(rec, name)
        else:
            fill_memcpy(rec, i)
    records = buf.records[::-1] if gaps[0] == 0 and gaps[2] > 4096 else buf.records
    sink = RecordingSink()
    bound_source(sink).buffer_completed(records)
    rows = sink.rows()
    assert [r["correlation"] for r in rows] == [900, 701, 902, 703, 904]
    assert [r["stream"] for r in rows] == [13, 21, 15, 21, 17]
    assert [r["bytes"] for r in rows] == [0, (1 << 33) + 1, 0, (1 << 33) + 3, 0]


def test_other_record_kinds_are_ignored() -> None:
    sink = RecordingSink()
    api = cupti.ActivityAPI()
    api.kind = int(AK.RUNTIME)
    marker = cupti.ActivityMarker2()
    marker.kind = int(AK.MARKER)
    bound_source(sink).buffer_completed([api, fill_memcpy(cupti.ActivityMemcpy6()), marker])
    assert sink.rows() == [MEMCPY_EXPECTED]
    assert sink.dropped == 0


def test_only_unknown_kinds_or_nothing_submits_nothing() -> None:
    sink = RecordingSink()
    source = bound_source(sink)
    source.buffer_completed([])
    source.buffer_completed([cupti.ActivityAPI()])
    assert sink.tables == []


def test_record_without_timestamps_gets_zero_duration() -> None:
    sink = RecordingSink()
    rec = fill_kernel(cupti.ActivityKernel11())
    rec.end = 0  # CUPTI could not time it
    bound_source(sink).buffer_completed([rec])
    assert sink.rows()[0]["duration_ns"] == 0


def test_callback_swallows_failures_counts_them_and_warns_once() -> None:
    sink = RecordingSink(fail_submit=True)
    source = bound_source(sink)
    recs = [fill_kernel(cupti.ActivityKernel11()), fill_memcpy(cupti.ActivityMemcpy6())]
    source.buffer_completed(recs)  # must not raise into CUPTI
    source.buffer_completed(recs[:1])
    assert sink.dropped == 3
    assert source.dropped == 3
    assert len(sink.warnings) == 1
    assert "queue exploded" in sink.warnings[0]


def test_callback_before_bind_is_a_no_op() -> None:
    CuptiSource().buffer_completed([fill_kernel(cupti.ActivityKernel11())])


def test_buffer_requested_asks_for_large_buffers() -> None:
    assert CuptiSource().buffer_requested() == (8 << 20, 0)
    assert CuptiSource(buffer_bytes=32 << 20).buffer_requested() == (32 << 20, 0)


@pytest.mark.skipif(HAVE_DRIVER, reason="a CUDA driver is present")
def test_start_without_driver_raises_one_clear_line_and_enables_nothing() -> None:
    source = CuptiSource()
    with pytest.raises(SourceUnavailable) as info:
        source.start(RecordingSink())
    message = str(info.value)
    assert "no CUDA driver found (libcuda.so.1" in message
    assert "\n" not in message
    assert source.enabled_kinds == ()
    assert isinstance(info.value.__cause__, RuntimeError)  # the real NotSupportedError
    source.stop(time.monotonic() + 1)  # after a failed start: nothing to do, no raise


@pytest.mark.skipif(HAVE_DRIVER, reason="a CUDA driver is present")
def test_tracer_clock_without_driver_is_none() -> None:
    assert CuptiSource().tracer_clock_ns() is None


def test_stop_before_start_never_raises() -> None:
    CuptiSource().stop(time.monotonic())


def test_missing_cupti_python_is_source_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cupti", None)  # import cupti -> ImportError
    with pytest.raises(SourceUnavailable, match=r"^cupti-python is not installed") as info:
        CuptiSource().start(RecordingSink())
    assert str(info.value) == NOT_INSTALLED


def test_importing_the_module_does_not_import_cupti() -> None:
    import subprocess

    code = (
        "import sys, tfprof.agent.sources.cupti; "
        "sys.exit(1 if 'cupti' in sys.modules or 'numpy' in sys.modules else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


GPU_WORKLOAD = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from test_cupti_source import RecordingSink
from tfprof.agent.sources.cupti import CuptiSource

sink = RecordingSink()
source = CuptiSource()
source.start(sink)  # before CUDA initialises, as the hook does at start-up
clock = source.tracer_clock_ns()
wall = time.time_ns()
import torch

a = torch.randn(512, 512, device="cuda")
b = (a @ a).relu()
host = b.cpu()
torch.cuda.synchronize()
source.stop(time.monotonic() + 10)
rows = sink.rows()
print(json.dumps({
    "rows": rows,
    "names": {r["name"]: sink.name(r["name"]) for r in rows},
    "devices": sink.devices,
    "clock_minus_wall": clock - wall,
    "enabled_after_stop": list(source.enabled_kinds),
    "warnings": sink.warnings,
    "dropped": source.dropped,
}))
"""


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_DRIVER, reason="needs a CUDA driver and GPU")
def test_traces_a_real_cuda_workload() -> None:
    import json
    import os
    import subprocess

    pytest.importorskip("torch")
    # A fresh interpreter: CUPTI must be armed before CUDA initialises (DEVICE records
    # only come then), exactly as the hook does it.
    done = subprocess.run(
        [sys.executable, "-c", GPU_WORKLOAD, os.path.dirname(__file__)],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    rows = out["rows"]
    kernels = [r for r in rows if r["kind"] == RecordKind.KERNEL]
    assert kernels, "no kernel records"
    assert all(out["names"][str(r["name"])] for r in kernels)
    assert all(r["grid_x"] > 0 and r["block_x"] > 0 for r in kernels)
    dtoh = [r for r in rows if r["kind"] == RecordKind.MEMCPY and r["copy_kind"] == 2]
    assert any(r["bytes"] == 512 * 512 * 4 for r in dtoh)
    assert all(r["duration_ns"] >= 0 and r["start_ns"] > 0 for r in rows)
    assert out["devices"] and out["devices"][0]["uuid"].startswith("GPU-")
    assert abs(out["clock_minus_wall"]) < 10**9
    assert out["enabled_after_stop"] == []
    assert out["warnings"] == [] and out["dropped"] == 0


# -- SYNCHRONIZATION ------------------------------------------------------------------

SYNC_TYPE = cupti.ActivitySynchronizationType


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


@pytest.mark.parametrize(
    "cls", [*classes("Synchronization"), cupti.ActivitySynchronization],
    ids=[*ids(classes("Synchronization")), "ActivitySynchronization"],
)  # fmt: skip
def test_sync_record_takes_type_stream_and_the_device_of_its_context(cls: type) -> None:
    sink = RecordingSink()
    bound_source(sink).buffer_completed([context_record(), fill_sync(cls())])
    assert sink.rows() == [
        {
            **dict.fromkeys(COLUMNS, 0),
            "kind": RecordKind.SYNC,
            "start_ns": T0 + 40,
            "duration_ns": 900,
            "device": 2,  # from the CONTEXT record
            "context": 11,
            "stream": 21,
            "correlation": 300,
            "sync_type": int(SYNC_TYPE.STREAM_SYNCHRONIZE),
        }
    ]


def test_context_wide_sync_keeps_cuptis_invalid_stream_value() -> None:
    from tfprof.core.records import SYNC_NO_STREAM

    sink = RecordingSink()
    rec = fill_sync(
        cupti.ActivitySynchronization2(),
        stream=SYNC_NO_STREAM,
        sync_type=SYNC_TYPE.CONTEXT_SYNCHRONIZE,
    )
    bound_source(sink).buffer_completed([rec])  # no CONTEXT record seen: device 0
    (row,) = sink.rows()
    assert (row["stream"], row["device"], row["sync_type"]) == (SYNC_NO_STREAM, 0, 4)


def test_sync_bulk_and_attribute_paths_agree() -> None:
    recs = [
        context_record(),
        fill_kernel(cupti.ActivityKernel13(), 0, name="k0"),
        fill_sync(cupti.ActivitySynchronization2(), 1, sync_type=SYNC_TYPE.EVENT_SYNCHRONIZE),
        fill_memcpy(cupti.ActivityMemcpy7(), 2),
        fill_sync(cupti.ActivitySynchronization2(), 3),
    ]
    bulk, by_attr = RecordingSink(), RecordingSink()
    bound_source(bulk).buffer_completed(recs)
    source = bound_source(by_attr)
    assert source.converter is not None
    table = source.converter.convert_by_attributes(recs)
    assert table is not None
    by_attr.tables.append(table)
    rows = bulk.rows()
    assert [r["kind"] for r in rows] == [1, 4, 2, 4]
    assert [r["sync_type"] for r in rows] == [0, 1, 0, 3]
    assert rows == by_attr.rows()


def test_synchronization_is_among_the_kinds_tried() -> None:
    from tfprof.agent.sources.cupti import _kinds_to_enable, _optional_kinds

    assert int(AK.SYNCHRONIZATION) in _optional_kinds(cupti)
    assert int(AK.SYNCHRONIZATION) not in _kinds_to_enable(cupti)  # never fatal
