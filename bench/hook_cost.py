"""What the CUPTI buffer callback costs per record, on genuine cupti-python record objects.

Builds N kernel, memcpy and host-side records (ActivityKernel11, ActivityMemcpy6,
ActivityAPI, ActivityMarker2 start/end pairs, ActivityMemory4 objects) in three memory
layouts:

- ``chunked``: each struct one malloc chunk after the previous one, via ``from_ptr`` into
  one block; this is what cupti-python 13.4 hands the callback on a real GPU (it copies
  every record out of CUPTI's buffer into its own heap block: 248-byte kernel structs
  256 bytes apart, seen on an H100);
- ``packed``: structs back to back, as inside CUPTI's own buffer;
- ``objects``: objects constructed one by one (their structs wherever malloc put them);

then times, median of several runs:

- ``bulk``: ``RecordConverter.convert``, the conversion the callback runs (raw struct
  bytes decoded with cupti-python's numpy dtypes);
- ``attributes``: the plain attribute-read path (the fallback for unknown classes);
- ``callback``: the whole ``CuptiSource.buffer_completed`` with a sink that keeps the
  table (conversion plus submit).

Run: python bench/hook_cost.py [N]. Prints figures, asserts nothing; no GPU needed.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from cupti import cupti

from tfprof.agent.inprocess.frames import StringTable
from tfprof.agent.inprocess.sources.cupti import CuptiSource
from tfprof.core.records import DeviceInfo, RecordTable

RUNS = 7
KERNEL_NAMES = [f"_ZN7cutlass6KernelINS_4gemm6kernel{i}EEEvNT_6ParamsE" for i in range(64)]
# CUPTI points every record of one kernel at the same name string; do the same (setting
# ``rec.name`` would give each record its own copy).
_NAME_BUFFERS = [ctypes.create_string_buffer(name.encode()) for name in KERNEL_NAMES]
_NAME_OFFSET: int = cupti.activity_kernel11_dtype.fields["name"][1]  # type: ignore[index]


def _share_name(rec: Any, i: int) -> None:
    address = ctypes.addressof(_NAME_BUFFERS[i % len(_NAME_BUFFERS)])
    ctypes.c_int64.from_address(rec.ptr + _NAME_OFFSET).value = address


class _Sink:
    def __init__(self) -> None:
        self.strings = StringTable()
        self.tables: list[RecordTable] = []

    def intern(self, name: str) -> int:
        return self.strings.intern(name)

    def submit(self, table: RecordTable, wait: bool = False) -> bool:
        self.tables.append(table)
        return True

    def add_devices(self, devices: list[DeviceInfo]) -> None:
        pass

    def add_tracer_dropped(self, count: int) -> None:
        pass

    def stack_sink(self) -> None:
        return None  # stacks are bench/code_cost.py's

    def warn(self, message: str) -> None:
        print("warn:", message)


def _fill_kernel(rec: Any, i: int) -> None:
    rec.kind = int(cupti.ActivityKind.CONCURRENT_KERNEL)
    rec.start = 1_700_000_000_000_000_000 + i * 1000
    rec.end = rec.start + 700
    rec.device_id = i % 8
    rec.context_id = 1
    rec.stream_id = 7 + i % 4
    rec.correlation_id = i
    rec.grid_x, rec.grid_y, rec.grid_z = 128, 2, 1
    rec.block_x, rec.block_y, rec.block_z = 256, 1, 1
    rec.registers_per_thread = 64
    rec.static_shared_memory = 1024
    rec.dynamic_shared_memory = 49152


def _fill_memcpy(rec: Any, i: int) -> None:
    rec.kind = int(cupti.ActivityKind.MEMCPY)
    rec.start = 1_700_000_000_000_000_000 + i * 1000 + 500
    rec.end = rec.start + 300
    rec.bytes = 4096 * (1 + i % 16)
    rec.copy_kind = 1
    rec.src_kind = 2
    rec.dst_kind = 3
    rec.device_id = i % 8
    rec.context_id = 1
    rec.stream_id = 7
    rec.correlation_id = i


OP_NAMES = [f"aten::op{i}" for i in range(64)]
_OP_BUFFERS = [ctypes.create_string_buffer(name.encode()) for name in OP_NAMES]
_MARKER_NAME_OFFSET: int = cupti.activity_marker2_dtype.fields["name"][1]  # type: ignore[index]


def _fill_api(rec: Any, i: int) -> None:
    rec.kind = int(cupti.ActivityKind.RUNTIME)
    rec.cbid = int(cupti.RuntimeApiTraceCbid.cudaLaunchKernel_v7000)
    rec.start = 1_700_000_000_000_000_000 + i * 1000 - 400
    rec.end = rec.start + 4000
    rec.process_id = 4242
    rec.thread_id = 4243 + i % 4
    rec.correlation_id = i
    rec.return_value = 0


def _fill_marker(rec: Any, i: int) -> None:
    # Records 2k and 2k+1 are the start and end of range k (PyTorch op ranges).
    rec.kind = int(cupti.ActivityKind.MARKER)
    rec.flags_ = 4 if i % 2 else 2  # MARKER_END, MARKER_START
    rec.timestamp = 1_700_000_000_000_000_000 + i * 1000
    rec.id = i // 2
    rec.object_kind = int(cupti.ActivityObjectKind.THREAD)
    rec.object_id.pt.thread_id = 4243
    if not i % 2:  # CUPTI gives each start its own name string
        address = ctypes.addressof(_OP_BUFFERS[i // 2 % len(_OP_BUFFERS)])
        ctypes.c_int64.from_address(rec.ptr + _MARKER_NAME_OFFSET).value = address


def _fill_memory(rec: Any, i: int) -> None:
    rec.kind = int(cupti.ActivityKind.MEMORY2)
    rec.memory_operation_type = 1 + i % 2
    rec.memory_kind = int(cupti.ActivityMemoryKind.DEVICE)
    rec.correlation_id = i
    rec.address = 0x7F00_0000_0000 + (i // 2 << 21)
    rec.bytes = 2 << 20
    rec.timestamp = 1_700_000_000_000_000_000 + i * 1000
    rec.device_id = i % 8
    rec.context_id = 1
    rec.stream_id = 7


CLASSES: dict[str, Any] = {
    "kernel": cupti.ActivityKernel11,
    "memcpy": cupti.ActivityMemcpy6,
    "api": cupti.ActivityAPI,
    "marker": cupti.ActivityMarker2,
    "memory": cupti.ActivityMemory4,
}
DTYPES: dict[str, Any] = {
    "kernel": cupti.activity_kernel11_dtype,
    "memcpy": cupti.activity_memcpy6_dtype,
    "api": cupti.activity_api_dtype,
    "marker": cupti.activity_marker2_dtype,
    "memory": cupti.activity_memory4_dtype,
}


def _fill(kind: str, rec: Any, i: int, nth: int) -> None:
    """Fill record ``i`` of a buffer, the ``nth`` of its kind."""
    if kind == "kernel":
        _fill_kernel(rec, i)
        _share_name(rec, i)
    elif kind == "memcpy":
        _fill_memcpy(rec, i)
    elif kind == "api":
        _fill_api(rec, i)
    elif kind == "marker":
        _fill_marker(rec, nth)
    else:
        _fill_memory(rec, i)


def packed_records(kinds: Sequence[str], chunked: bool = False) -> tuple[list[Any], Any]:
    """Records in one block: back to back, or one malloc chunk apart (``chunked``)."""
    classes, dtypes = CLASSES, DTYPES
    # glibc malloc: 8 bytes of header, chunks rounded up to 16 bytes
    steps = {k: (d.itemsize + 8 + 15) // 16 * 16 if chunked else d.itemsize
             for k, d in dtypes.items()}  # fmt: skip
    buf = ctypes.create_string_buffer(sum(steps[k] for k in kinds) + 16)
    base = (ctypes.addressof(buf) + 15) // 16 * 16
    records, offset = [], 0
    seen: dict[str, int] = {}
    for i, kind in enumerate(kinds):
        rec = classes[kind].from_ptr(base + offset, owner=buf)
        offset += steps[kind]
        seen[kind] = nth = seen.get(kind, -1) + 1
        _fill(kind, rec, i, nth)
        records.append(rec)
    return records, buf


def scattered_records(kinds: Sequence[str]) -> list[Any]:
    records = []
    seen: dict[str, int] = {}
    for i, kind in enumerate(kinds):
        rec = CLASSES[kind]()
        seen[kind] = nth = seen.get(kind, -1) + 1
        _fill(kind, rec, i, nth)
        records.append(rec)
    return records


def median_us_per_record(fn: Callable[[Sequence[Any]], Any], records: Sequence[Any]) -> float:
    fn(records)  # warm caches (names interned once, like a long-running job)
    times = []
    for _ in range(RUNS):
        t0 = time.perf_counter()
        fn(records)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) / len(records) * 1e6


# What a traced PyTorch step looks like with every switch on: per op, its NVTX range
# (2 records), its launch call and its kernel; a copy now and then.
HOST_MIX = ("marker", "api", "kernel", "marker", "marker", "api", "kernel", "marker", "api",
            "memcpy")  # fmt: skip


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "records", nargs="?", type=int, default=20_000, metavar="N",
        help="records per buffer (default: 20000)",
    )  # fmt: skip
    n = parser.parse_args(argv[1:]).records
    sink = _Sink()
    source = CuptiSource()
    source.bind(sink)
    converter = source.converter
    assert converter is not None

    def callback(records: Sequence[Any]) -> None:
        source.buffer_completed(records)
        sink.tables.clear()

    mixes = {
        "kernels": ["kernel"] * n,
        "memcpys": ["memcpy"] * n,
        "mix 3:1": [("kernel", "kernel", "kernel", "memcpy")[i % 4] for i in range(n)],
        "api": ["api"] * n,
        "markers": ["marker"] * n,  # start/end pairs
        "memory": ["memory"] * n,
        "host mix": [HOST_MIX[i % len(HOST_MIX)] for i in range(n)],
    }
    print(f"cupti-python record conversion, {n} records per buffer, median of {RUNS} runs")
    print(f"{'records':<10} {'layout':<10} {'bulk':>10} {'attributes':>12} {'callback':>10}")
    print("(markers are paired start/end records: us per record, not per range)")
    for label, kinds in mixes.items():
        chunked, _keep1 = packed_records(kinds, chunked=True)
        packed, _keep2 = packed_records(kinds)
        objects = scattered_records(kinds)
        for layout, records in (("chunked", chunked), ("packed", packed), ("objects", objects)):
            bulk = median_us_per_record(converter.convert, records)
            attrs = median_us_per_record(converter.convert_by_attributes, records)
            whole = median_us_per_record(callback, records)
            print(f"{label:<10} {layout:<10} {bulk:>8.3f}us {attrs:>10.3f}us {whole:>8.3f}us")
    small = packed_records(["kernel"] * 64 + ["memcpy"] * 16, chunked=True)[0]
    print(
        f"small buffer (80 records, chunked): callback {median_us_per_record(callback, small):.3f}"
        " us/record"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
