"""The host side of the CUPTI source: API calls, NVTX ranges and device memory, decoded
from genuine cupti-python records (ActivityAPI, ActivityMarker2, ActivityMemory4) by the
bulk path and the attribute path alike.
"""

from __future__ import annotations

import ctypes
from types import SimpleNamespace
from typing import Any

import pytest
from cupti import cupti

from tests.unit.agent_cupti_fakes import (
    T0,
    PackedBuffer,
    RecordingSink,
    bound_source,
    fill_api,
    fill_kernel,
    fill_marker,
    fill_memory,
)
from tfprof.agent.inprocess.sources.cupti_api import ApiNames, api_name, apply_filter, is_recorded
from tfprof.agent.inprocess.sources.cupti_markers import (
    MARKER_END,
    MARKER_INSTANTANEOUS,
    MARKER_START,
    MarkerRanges,
)
from tfprof.core.cupti_labels import API_CATEGORIES, API_DRIVER, API_RUNTIME, MEMORY_OPS
from tfprof.core.records import COLUMNS, RecordKind, RecordTable

RT = cupti.RuntimeApiTraceCbid
DRV = cupti.DriverApiTraceCbid


def both_paths(records: list[Any]) -> tuple[list[dict[str, int]], RecordingSink]:
    """Rows of the bulk path; asserts the attribute path gives the same rows."""
    bulk = RecordingSink()
    bound_source(bulk).buffer_completed(records)
    by_attributes = RecordingSink()
    converter = bound_source(by_attributes).converter
    assert converter is not None
    table = converter.convert_by_attributes(records)
    if table is not None:
        by_attributes.tables.append(table)
    named = [
        {**r, "name": sink.name(r["name"]), "category": r["category"]}
        for sink in (bulk, by_attributes)
        for r in sink.rows()
    ]
    half = len(named) // 2
    assert named[:half] == named[half:]
    return bulk.rows(), bulk


# -- API records --------------------------------------------------------------------


def test_runtime_and_driver_calls_fill_every_column() -> None:
    records = [fill_api(cupti.ActivityAPI(), 0), fill_api(cupti.ActivityAPI(), 1, driver=True)]
    records[0].return_value = 2  # cudaErrorMemoryAllocation: kept as returned
    rows, sink = both_paths(records)
    runtime, driver = rows
    assert runtime == {
        **dict.fromkeys(COLUMNS, 0),
        "kind": RecordKind.API,
        "start_ns": T0 + 5,
        "duration_ns": 4,
        "correlation": 900,
        "name": runtime["name"],
        "thread": 31337,
        "cbid": int(RT.cudaLaunchKernel_v7000),
        "return_value": 2,
        "category": API_RUNTIME,
    }
    assert sink.name(runtime["name"]) == "cudaLaunchKernel"
    assert driver["category"] == API_DRIVER
    assert driver["cbid"] == int(DRV.cuLaunchKernel)
    assert sink.name(driver["name"]) == "cuLaunchKernel"
    assert (driver["thread"], driver["correlation"]) == (31338, 901)
    assert API_CATEGORIES.label(driver["category"]) == "cuda_driver"


def test_api_names_are_interned_once_per_function() -> None:
    records = [fill_api(cupti.ActivityAPI(), i) for i in range(6)]
    records[3].cbid = int(RT.cudaMemcpyAsync_v3020)
    sink = RecordingSink()
    source = bound_source(sink)
    source.buffer_completed(records[:3])
    source.buffer_completed(records[3:])
    names = [sink.name(r["name"]) for r in sink.rows()]
    assert names == ["cudaLaunchKernel"] * 3 + ["cudaMemcpyAsync"] + ["cudaLaunchKernel"] * 2
    assert sink.interned.count("cudaLaunchKernel") == 1


def test_a_callback_id_this_cupti_python_does_not_know_keeps_its_number() -> None:
    rows, sink = both_paths([fill_api(cupti.ActivityAPI(), cbid=99_999)])
    assert sink.name(rows[0]["name"]) == "cudaApi#99999"
    assert rows[0]["cbid"] == 99_999


def test_api_records_packed_as_in_cuptis_buffer_decode_in_bulk() -> None:
    buf = PackedBuffer([cupti.ActivityAPI] * 5)
    for i, rec in enumerate(buf.records):
        fill_api(rec, i, driver=i % 2 == 1)
    rows, sink = both_paths(buf.records)
    assert [r["correlation"] for r in rows] == [900, 901, 902, 903, 904]
    assert [sink.name(r["name"]) for r in rows] == [
        "cudaLaunchKernel",
        "cuLaunchKernel",
        "cudaLaunchKernel",
        "cuLaunchKernel",
        "cudaLaunchKernel",
    ]


# -- which calls are recorded -------------------------------------------------------


KEPT_RUNTIME = (
    "cudaLaunchKernel_v7000", "cudaLaunchKernelExC_v11060", "cudaGraphLaunch_v10000",
    "cudaMemcpyAsync_v3020", "cudaMemsetAsync_v3020", "cudaDeviceSynchronize_v3020",
    "cudaStreamSynchronize_v3020", "cudaEventSynchronize_v3020", "cudaMalloc_v3020",
    "cudaFree_v3020", "cudaMallocAsync_v11020", "cudaStreamWaitEvent_v3020",
)  # fmt: skip
DROPPED_RUNTIME = (
    "cudaGetDevice_v3020", "cudaGetLastError_v3020", "cudaPeekAtLastError_v3020",
    "cudaSetDevice_v3020", "cudaStreamQuery_v3020", "cudaGetDeviceCount_v3020",
)  # fmt: skip
KEPT_DRIVER = (
    "cuLaunchKernel", "cuLaunchKernelEx", "cuMemcpyHtoDAsync_v2", "cuCtxSynchronize",
    "cuMemAlloc_v2", "cuMemFree_v2", "cuGraphLaunch",
)  # fmt: skip
DROPPED_DRIVER = (
    "cuCtxGetCurrent", "cuDevicePrimaryCtxGetState", "cuKernelGetAttribute",
    "cuDeviceGetAttribute", "cuPointerGetAttribute",
)  # fmt: skip


def test_the_filter_keeps_launches_copies_syncs_and_allocations() -> None:
    names = ApiNames(cupti)
    off_runtime = set(names.unrecorded(API_RUNTIME))
    off_driver = set(names.unrecorded(API_DRIVER))
    assert [m for m in KEPT_RUNTIME if int(RT.__members__[m]) in off_runtime] == []
    assert [m for m in DROPPED_RUNTIME if int(RT.__members__[m]) not in off_runtime] == []
    assert [m for m in KEPT_DRIVER if int(DRV.__members__[m]) in off_driver] == []
    assert [m for m in DROPPED_DRIVER if int(DRV.__members__[m]) not in off_driver] == []


def test_runtime_names_lose_their_version_suffix_driver_names_keep_theirs() -> None:
    assert api_name(API_RUNTIME, "cudaLaunchKernel_v7000") == "cudaLaunchKernel"
    assert api_name(API_RUNTIME, "cudaMemcpyAsync_ptsz_v7000") == "cudaMemcpyAsync_ptsz"
    assert api_name(API_DRIVER, "cuMemAlloc_v2") == "cuMemAlloc_v2"
    assert is_recorded(API_DRIVER, "cuMemAlloc_v2")
    assert not is_recorded(API_RUNTIME, "cudaGetDevice")


def test_apply_filter_switches_off_exactly_the_unrecorded_ids() -> None:
    switched: list[tuple[str, int, int]] = []
    module = SimpleNamespace(
        RuntimeApiTraceCbid=RT,
        DriverApiTraceCbid=DRV,
        activity_enable_runtime_api=lambda cbid, on: switched.append(("rt", cbid, on)),
        activity_enable_driver_api=lambda cbid, on: switched.append(("drv", cbid, on)),
    )
    names = ApiNames(cupti)
    assert apply_filter(module, names, API_RUNTIME) == len(names.unrecorded(API_RUNTIME))  # type: ignore[arg-type]
    assert apply_filter(module, names, API_DRIVER) == len(names.unrecorded(API_DRIVER))  # type: ignore[arg-type]
    assert {on for _, _, on in switched} == {0}
    assert ("rt", int(RT.cudaGetDevice_v3020), 0) in switched
    assert ("drv", int(DRV.cuCtxGetCurrent), 0) in switched
    assert not any(
        cbid == int(RT.cudaLaunchKernel_v7000) for kind, cbid, _ in switched if kind == "rt"
    )


def test_apply_filter_without_a_driver_raises_the_real_error() -> None:
    with pytest.raises(RuntimeError, match="CUDA driver is not found"):
        apply_filter(cupti, ApiNames(cupti), API_RUNTIME)


# -- NVTX ranges --------------------------------------------------------------------


def marker(marker_id: int, flags: int, ts: int, **kw: Any) -> Any:
    return fill_marker(cupti.ActivityMarker2(), marker_id, flags, ts, **kw)


def test_push_pop_ranges_pair_into_one_row_each_nested_ones_too() -> None:
    records = [
        marker(1, MARKER_START, T0, name="train_step", thread=7),
        marker(2, MARKER_START, T0 + 10, name="aten::mm", domain="PyTorch", thread=7),
        marker(2, MARKER_END, T0 + 30, thread=7),
        marker(3, MARKER_INSTANTANEOUS, T0 + 40, name="checkpoint", thread=8),
        marker(1, MARKER_END, T0 + 100, thread=7),
    ]
    rows, sink = both_paths(records)
    got = [
        (sink.name(r["name"]), r["start_ns"] - T0, r["duration_ns"], r["thread"],
         sink.name(r["category"]), r["external_id"])
        for r in rows
    ]  # fmt: skip
    assert got == [
        ("train_step", 0, 100, 7, "", 1),  # the default domain is ""
        ("aten::mm", 10, 20, 7, "PyTorch", 2),
        ("checkpoint", 40, 0, 8, "", 3),
    ]
    assert all(r["kind"] == RecordKind.MARKER for r in rows)
    assert sink.dropped == 0


def test_a_range_split_over_two_buffers_is_one_row() -> None:
    sink = RecordingSink()
    source = bound_source(sink)
    source.buffer_completed([marker(5, MARKER_START, T0, name="epoch")])
    assert sink.rows() == []
    source.buffer_completed([marker(5, MARKER_END, T0 + 500)])
    (row,) = sink.rows()
    assert (sink.name(row["name"]), row["duration_ns"], row["external_id"]) == ("epoch", 500, 5)


def test_an_end_without_its_start_is_counted_as_dropped() -> None:
    sink = RecordingSink()
    bound_source(sink).buffer_completed([marker(9, MARKER_END, T0)])
    assert sink.rows() == []
    assert sink.dropped == 1


def test_ranges_open_at_stop_end_when_tracing_stopped() -> None:
    sink = RecordingSink()
    source = bound_source(sink)
    source.buffer_completed([marker(1, MARKER_START, T0, name="main")])
    converter = source.converter
    assert converter is not None
    table = converter.close_markers(T0 + 1_000)
    assert table is not None
    sink.tables.append(table)
    (row,) = sink.rows()
    assert (sink.name(row["name"]), row["duration_ns"]) == ("main", 1_000)
    assert converter.close_markers(T0 + 2_000) is None  # closed once


def test_open_ranges_are_bounded_and_the_given_up_ones_counted() -> None:
    ranges = MarkerRanges(max_open=2)
    records = [(MARKER_START, T0 + i, i, 1, f"r{i}", "") for i in range(3)]
    records.append((MARKER_END, T0 + 10, 0, 1, "", ""))  # its start was given up
    records.append((MARKER_END, T0 + 11, 2, 1, "", ""))
    rows = ranges.add(records, len, len)
    assert [row[5] for row in rows] == [2]
    assert ranges.unpaired == 2
    assert len(ranges) == 1


def test_markers_with_kernels_api_and_memory_in_one_buffer() -> None:
    records = [
        marker(1, MARKER_START, T0, name="step"),
        fill_api(cupti.ActivityAPI(), 0),
        fill_kernel(cupti.ActivityKernel11(), 0),
        fill_memory(cupti.ActivityMemory4(), 0),
        marker(1, MARKER_END, T0 + 900),
    ]
    sink = RecordingSink()
    bound_source(sink).buffer_completed(records)
    kinds = sorted(r["kind"] for r in sink.rows())
    assert kinds == [RecordKind.KERNEL, RecordKind.API, RecordKind.MARKER, RecordKind.MEMORY]
    by_kind = {r["kind"]: r for r in sink.rows()}
    # the launch and its kernel share the correlation id
    assert by_kind[RecordKind.API]["correlation"] == by_kind[RecordKind.KERNEL]["correlation"]


# -- device memory ------------------------------------------------------------------


def test_allocation_and_release_fill_every_column() -> None:
    records = [
        fill_memory(cupti.ActivityMemory4(), 0, nbytes=3 << 30),
        fill_memory(cupti.ActivityMemory4(), 1, release=True, nbytes=1 << 20),
    ]
    rows, _ = both_paths(records)
    alloc, release = rows
    assert alloc == {
        **dict.fromkeys(COLUMNS, 0),
        "kind": RecordKind.MEMORY,
        "start_ns": T0 + 60,
        "device": 2,
        "context": 11,
        "stream": 7,
        "correlation": 800,
        "bytes": 3 << 30,
        "src_kind": int(cupti.ActivityMemoryKind.DEVICE),
        "address": 0x7F00_0000_0000,
        "memory_op": 1,
    }
    assert MEMORY_OPS.label(alloc["memory_op"]) == "allocation"
    assert MEMORY_OPS.label(release["memory_op"]) == "release"
    assert release["address"] == 0x7F00_0000_0000 + (1 << 32)


def test_the_record_table_builders_match_the_decoder() -> None:
    table = RecordTable()
    table.add_api(start_ns=1, end_ns=5, thread=3, cbid=211, category=API_RUNTIME, name=4,
                  correlation=9, return_value=1)  # fmt: skip
    table.add_marker(start_ns=2, end_ns=2, thread=3, name=5, category=6, external_id=7)
    table.add_memory(timestamp_ns=3, device=1, nbytes=8, address=16, memory_op=2,
                     memory_kind=3, context=4, stream=5, correlation=6)  # fmt: skip
    rows = [dict(zip(COLUMNS, values, strict=True)) for values in zip(*table.columns, strict=True)]
    assert {k: v for k, v in rows[0].items() if v} == {
        "kind": RecordKind.API, "start_ns": 1, "duration_ns": 4, "correlation": 9, "name": 4,
        "thread": 3, "cbid": 211, "return_value": 1, "category": API_RUNTIME,
    }  # fmt: skip
    assert {k: v for k, v in rows[1].items() if v} == {
        "kind": RecordKind.MARKER, "start_ns": 2, "name": 5, "thread": 3, "external_id": 7,
        "category": 6,
    }  # fmt: skip
    assert {k: v for k, v in rows[2].items() if v} == {
        "kind": RecordKind.MEMORY, "start_ns": 3, "device": 1, "context": 4, "stream": 5,
        "correlation": 6, "bytes": 8, "src_kind": 3, "address": 16, "memory_op": 2,
    }  # fmt: skip


def test_marker_names_are_read_per_record_not_cached_by_address() -> None:
    # Two ranges whose names CUPTI placed at the same address, one after the other.
    name = ctypes.create_string_buffer(b"first", 16)
    offset = PackedBuffer.dtype(cupti.ActivityMarker2).fields["name"][1]
    sink = RecordingSink()
    source = bound_source(sink)
    for i, text in enumerate((b"first", b"second")):
        name.value = text
        rec = marker(i, MARKER_INSTANTANEOUS, T0 + i)
        ctypes.c_int64.from_address(rec.ptr + offset).value = ctypes.addressof(name)
        source.buffer_completed([rec])
    assert [sink.name(r["name"]) for r in sink.rows()] == ["first", "second"]
