"""The CUPTI buffer decoder (sources/cupti_records.py), on genuine cupti-python records.

Every struct version of every record class this cupti-python ships goes through the
bulk path and, where they must agree, the attribute path.
"""

from __future__ import annotations

import ctypes

import pytest
from cupti import cupti

from tests.unit.agent_cupti_fakes import (
    AK,
    SYNC_TYPE,
    T0,
    UUID,
    PackedBuffer,
    RecordingSink,
    bound_source,
    classes,
    context_record,
    fill_device,
    fill_kernel,
    fill_memcpy,
    fill_memset,
    fill_peer,
    fill_sync,
    ids,
    shared_name_pointer,
)
from tfprof.agent.inprocess.sources.cupti_records import format_uuid
from tfprof.core.records import COLUMNS, RecordKind

KERNEL_EXPECTED = {
    **dict.fromkeys(COLUMNS, 0),
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
    **dict.fromkeys(COLUMNS, 0),
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
    marker_data = cupti.ActivityMarkerData()
    marker_data.kind = int(AK.MARKER_DATA)
    overhead = cupti.ActivityOverhead3()
    overhead.kind = int(AK.OVERHEAD)
    records = [marker_data, fill_memcpy(cupti.ActivityMemcpy6()), overhead]
    bound_source(sink).buffer_completed(records)
    assert sink.rows() == [MEMCPY_EXPECTED]
    assert sink.dropped == 0


def test_only_unknown_kinds_or_nothing_submits_nothing() -> None:
    sink = RecordingSink()
    source = bound_source(sink)
    source.buffer_completed([])
    source.buffer_completed([cupti.ActivityMarkerData()])
    assert sink.tables == []


def test_record_without_timestamps_gets_zero_duration() -> None:
    sink = RecordingSink()
    rec = fill_kernel(cupti.ActivityKernel11())
    rec.end = 0  # CUPTI could not time it
    bound_source(sink).buffer_completed([rec])
    assert sink.rows()[0]["duration_ns"] == 0


# -- SYNCHRONIZATION ------------------------------------------------------------------


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
