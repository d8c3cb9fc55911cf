"""agent/inprocess/frames.py: record tables, record frames, the string table and frame
reassembly."""

from __future__ import annotations

import array
import json
import random
import threading

import numpy as np
import pytest

from tfprof.agent.inprocess.frames import (
    HEADER,
    RECORDS_HEADER,
    FrameType,
    StringTable,
    decode_records,
    encode_frame,
    encode_json_frame,
    encode_records_frame,
    iter_frames,
)
from tfprof.core import records
from tfprof.core.records import COLUMNS, NUM_COLUMNS, RecordKind, RecordTable


def row(table: RecordTable, i: int) -> dict[str, int]:
    return {name: int(table.column(name)[i]) for name in COLUMNS}


def decoded_columns(payload: memoryview) -> dict[str, list[int]]:
    d = decode_records(payload)
    table = np.frombuffer(d.column_data, dtype="<i8").reshape(NUM_COLUMNS, d.count)
    return {name: table[i].tolist() for i, name in enumerate(COLUMNS)}


def split_frame(frame: bytes) -> tuple[FrameType, memoryview]:
    ((kind, payload),) = list(iter_frames([frame]))
    return kind, payload


def sample_table() -> RecordTable:
    t = RecordTable()
    t.add_kernel(start_ns=1_000, end_ns=1_500, device=1, stream=7, name=3, context=2,
                 correlation=11, grid=(4, 5, 6), block=(32, 2, 1), registers=40,
                 static_smem=128, dynamic_smem=256)  # fmt: skip
    t.add_memcpy(start_ns=2_000, end_ns=2_900, device=0, stream=8, nbytes=1 << 20, copy_kind=1,
                 src_kind=2, dst_kind=3, context=4, correlation=12, dst_device=1,
                 name=5)  # fmt: skip
    t.add_memset(start_ns=3_000, end_ns=3_050, device=2, stream=9, nbytes=64, memory_kind=3,
                 context=6, correlation=13, name=0)  # fmt: skip
    return t


def test_add_kernel_memcpy_memset_fill_every_column() -> None:
    t = sample_table()
    assert len(t) == 3
    zeros = dict.fromkeys(COLUMNS, 0)
    assert row(t, 0) == {**zeros, "kind": RecordKind.KERNEL, "start_ns": 1_000,
                         "duration_ns": 500, "device": 1, "context": 2, "stream": 7,
                         "correlation": 11, "name": 3, "grid_x": 4, "grid_y": 5, "grid_z": 6,
                         "block_x": 32, "block_y": 2, "block_z": 1, "registers": 40,
                         "static_smem": 128, "dynamic_smem": 256}  # fmt: skip
    assert row(t, 1) == {**zeros, "kind": RecordKind.MEMCPY, "start_ns": 2_000,
                         "duration_ns": 900, "device": 0, "context": 4, "stream": 8,
                         "correlation": 12, "name": 5, "bytes": 1 << 20, "copy_kind": 1,
                         "src_kind": 2, "dst_kind": 3, "dst_device": 1}  # fmt: skip
    assert row(t, 2) == {**zeros, "kind": RecordKind.MEMSET, "start_ns": 3_000,
                         "duration_ns": 50, "device": 2, "context": 6, "stream": 9,
                         "correlation": 13, "bytes": 64, "src_kind": 3}  # fmt: skip


def test_records_frame_round_trip() -> None:
    t = sample_table()
    frame = encode_records_frame(t, string_base=7, strings=["gemm", "üñí", 'a,"b"'], dropped=42)
    kind, payload = split_frame(frame)
    assert kind is FrameType.RECORDS
    d = decode_records(payload)
    assert (d.dropped, d.string_base, d.strings, d.count) == (42, 7, ["gemm", "üñí", 'a,"b"'], 3)
    assert decoded_columns(payload) == {name: list(t.column(name)) for name in COLUMNS}


def test_records_frame_without_strings_or_records() -> None:
    kind, payload = split_frame(encode_records_frame(RecordTable(), 1, [], 0))
    d = decode_records(payload)
    assert kind is FrameType.RECORDS
    assert (d.dropped, d.string_base, d.strings, d.count) == (0, 1, [], 0)
    assert len(d.column_data) == 0


def test_large_and_negative_values_survive_as_int64() -> None:
    t = RecordTable()
    t.add_kernel(start_ns=(1 << 62), end_ns=(1 << 62) + 5, device=0, stream=-1, name=0)
    values = decoded_columns(split_frame(encode_records_frame(t, 1, [], 0))[1])
    assert values["start_ns"] == [1 << 62]
    assert values["stream"] == [-1]


def test_from_columns_with_numpy_and_zero_filled_missing_columns() -> None:
    n = 4
    start = np.arange(n, dtype=np.int64) * 100
    t = RecordTable.from_columns(
        {
            "kind": np.full(n, RecordKind.KERNEL, dtype=np.int64),
            "start_ns": start,
            "duration_ns": np.full(n, 10, dtype=np.int64),
            "name": np.array([1, 2, 1, 3], dtype=np.int64),
        },
        n,
    )
    assert len(t) == n
    values = decoded_columns(split_frame(encode_records_frame(t, 1, ["a", "b", "c"], 0))[1])
    assert values["start_ns"] == [0, 100, 200, 300]
    assert values["name"] == [1, 2, 1, 3]
    assert values["kind"] == [RecordKind.KERNEL] * n
    for name in set(COLUMNS) - {"kind", "start_ns", "duration_ns", "name"}:
        assert values[name] == [0] * n, name


def test_from_columns_rejects_unknown_and_ragged_columns() -> None:
    with pytest.raises(ValueError, match="unknown columns"):
        RecordTable.from_columns({"nonsense": np.zeros(2, dtype=np.int64)}, 2)
    with pytest.raises(ValueError, match="start_ns"):
        RecordTable.from_columns({"start_ns": np.zeros(3, dtype=np.int64)}, 2)


def test_record_table_needs_every_column() -> None:
    with pytest.raises(ValueError, match=f"expected {NUM_COLUMNS} columns"):
        RecordTable([array.array("q")] * (NUM_COLUMNS - 1))


@pytest.mark.parametrize("dtype", [np.int32, np.float64, np.uint8])
def test_encoding_rejects_non_int64_columns(dtype: type) -> None:
    t = RecordTable.from_columns({"start_ns": np.zeros(2, dtype=dtype)}, 2)
    with pytest.raises(TypeError, match="int64"):
        encode_records_frame(t, 1, [], 0)


def test_encoding_rejects_ragged_columns() -> None:
    t = RecordTable()
    t.add_kernel(start_ns=0, end_ns=1, device=0, stream=0, name=0)
    t.column("stream").append(5)  # one column now longer than the others
    with pytest.raises(ValueError, match="ragged"):
        encode_records_frame(t, 1, [], 0)


def test_decode_rejects_truncated_and_oversized_payloads() -> None:
    _, payload = split_frame(encode_records_frame(sample_table(), 1, ["x"], 0))
    raw = bytes(payload)
    with pytest.raises(ValueError, match="truncated"):
        decode_records(raw[: RECORDS_HEADER.size - 1])
    with pytest.raises(ValueError, match="expected"):
        decode_records(raw[:-8])
    with pytest.raises(ValueError, match="expected"):
        decode_records(raw + b"\0" * 8)
    # A header claiming more records than the payload holds.
    forged = RECORDS_HEADER.pack(0, 1, 0, 1000) + raw[RECORDS_HEADER.size + len(b'["x"]') :]
    with pytest.raises(ValueError, match="expected"):
        decode_records(forged)


def test_json_frames() -> None:
    frame = encode_json_frame(FrameType.HELLO, {"pid": 12, "argv": ["python", "t.py"]})
    kind, payload = split_frame(frame)
    assert kind is FrameType.HELLO
    assert json.loads(bytes(payload)) == {"pid": 12, "argv": ["python", "t.py"]}
    assert HEADER.unpack_from(frame) == (FrameType.HELLO, len(frame) - HEADER.size)


def test_iter_frames_reassembles_across_any_chunk_boundaries() -> None:
    stream = b"".join(
        [
            encode_json_frame(FrameType.HELLO, {"pid": 1}),
            encode_records_frame(sample_table(), 1, ["k1", "k2"], 0),
            encode_frame(FrameType.DEVICES, b"[]"),
            encode_frame(FrameType.GOODBYE, b""),  # an empty payload is a frame too
            encode_records_frame(sample_table(), 3, [], 5),
        ]
    )
    expected = [(k, bytes(p)) for k, p in iter_frames([stream])]
    assert [k for k, _ in expected] == [FrameType.HELLO, FrameType.RECORDS, FrameType.DEVICES,
                                        FrameType.GOODBYE, FrameType.RECORDS]  # fmt: skip
    rng = random.Random(1234)
    for _ in range(200):
        cuts = sorted(rng.sample(range(1, len(stream)), rng.randint(1, 40)))
        chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
        assert [(k, bytes(p)) for k, p in iter_frames(chunks)] == expected
    assert [(k, bytes(p)) for k, p in iter_frames(bytes([b]) for b in stream)] == expected


def test_iter_frames_holds_back_an_incomplete_frame() -> None:
    frame = encode_json_frame(FrameType.HELLO, {"pid": 1})
    assert list(iter_frames([frame[:-1]])) == []
    assert list(iter_frames([frame[:2]])) == []


def test_string_table_interns_once_and_sends_each_name_once() -> None:
    st = StringTable()
    assert st.intern("") == 0
    a, b = st.intern("alpha"), st.intern("beta")
    assert (a, b) == (1, 2)
    assert st.intern("alpha") == 1
    assert st.take_pending() == (1, ["alpha", "beta"])
    assert st.take_pending() == (3, [])
    assert st.intern("gamma") == 3
    assert st.take_pending() == (3, ["gamma"])


def test_string_table_restore_pending_resends_dropped_names() -> None:
    st = StringTable()
    st.intern("a")
    assert st.take_pending() == (1, ["a"])  # delivered
    st.intern("b")
    base, pending = st.take_pending()
    assert (base, pending) == (2, ["b"])
    st.restore_pending(base)  # that frame was dropped
    st.intern("c")
    assert st.take_pending() == (2, ["b", "c"])
    # Restoring an older base never skips names that were not delivered either.
    st.intern("d")
    base_d, _ = st.take_pending()
    st.restore_pending(1)
    st.restore_pending(base_d)
    assert st.take_pending() == (1, ["a", "b", "c", "d"])


def test_string_table_is_thread_safe() -> None:
    st = StringTable()
    names = [f"kernel_{i}" for i in range(300)]
    barrier = threading.Barrier(16)
    results: list[dict[str, int]] = []
    lock = threading.Lock()

    def worker(seed: int) -> None:
        order = names[:]
        random.Random(seed).shuffle(order)
        barrier.wait(timeout=10)
        got = {n: st.intern(n) for n in order}
        with lock:
            results.append(got)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(results) == 16
    assert all(r == results[0] for r in results)
    assert sorted(results[0].values()) == list(range(1, len(names) + 1))
    base, pending = st.take_pending()
    assert base == 1
    assert sorted(pending) == sorted(names)
    assert [results[0][n] for n in pending] == list(range(1, len(names) + 1))


def test_record_kind_values_match_the_proto() -> None:
    from tfprof.proto import collector_pb2 as pb

    for kind in RecordKind:
        assert pb.RecordKind.Value(kind.name) == kind.value
    assert tuple(f.name for f in pb.Records.DESCRIPTOR.fields) == records.COLUMNS
