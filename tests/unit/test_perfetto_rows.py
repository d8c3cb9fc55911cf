"""Perfetto packets encoded from columns (export/protowire.py, perfetto_rows.py): the
bytes parse with protobuf's own classes into exactly the messages meant, each column of
varints at its widest, and every slice, name, arg, track and counter of a timeline
survives."""

from __future__ import annotations

import io
import math
import zlib
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from tests.unit.mixed_timeline import expected_events, mixed_timeline
from tests.unit.perfetto_readback import inflated, perfetto_packets, perfetto_view
from tfprof.collector.export.protowire import (
    LEN,
    VARINT,
    encode_rows,
    fixed64,
    message,
    optional,
    tag,
    varint,
    varints,
)
from tfprof.collector.merged.whole import WholeTimeline as Timeline
from tfprof.core.records import RecordKind

pftrace = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


def test_varints_parse_as_protobufs_own_each_column_at_its_widest() -> None:
    rng = np.random.default_rng(7)
    edges = [0, 1, 127, 128, 16383, 16384, (1 << 21) - 1, 1 << 21, INT64_MAX, -1, INT64_MIN]
    for values in (
        np.array(edges),
        rng.integers(INT64_MIN, INT64_MAX, 300, dtype=np.int64),
        rng.integers(0, 1 << 14, 300),
        rng.integers(0, 128, 300),
        np.full(5, 300),
        # every width of 3 to 9 bytes, its edges included (3 to 8: one word per value)
        *(
            np.concatenate(
                [rng.integers(0, 1 << 7 * w, 50), [(1 << 7 * (w - 1)), (1 << 7 * w) - 1]]
            )
            for w in range(3, 10)
        ),
        rng.integers(0, 1 << 16, 300).astype(np.uint16),  # as the lake holds some columns
        rng.integers(0, 1 << 32, 300).astype(np.uint32),
    ):
        field = [tag(4, VARINT), varints(values)]  # DebugAnnotation.int_value
        rows = values.shape[0]
        data = encode_rows(message(tag(4, LEN), field), rows)  # TrackEvent.debug_annotations
        event = pftrace.TrackEvent.FromString(data)
        assert [a.int_value for a in event.debug_annotations] == values.tolist()
        widest = max(len(varint(v)) for v in values.tolist())
        assert len(data) == rows * (3 + widest)  # tag, size, tag, value: every row alike


def test_optional_pieces_and_nested_sizes() -> None:
    rng = np.random.default_rng(8)
    rows = 400
    present = rng.random(rows) < 0.5
    numbers = rng.integers(0, 1 << 40, rows)
    doubles = rng.random(rows) * 1e6

    def encoded(present: np.ndarray) -> bytes:
        body = [
            tag(9, VARINT) + varint(1),  # TrackEvent.type
            *optional(
                message(
                    tag(4, LEN), [tag(1, VARINT) + varint(3), tag(4, VARINT), varints(numbers)]
                ),
                present,
            ),
            tag(10, VARINT),  # name_iid
            varints(numbers % 1000),
            *message(tag(4, LEN), [tag(1, VARINT) + varint(5), tag(5, 1), fixed64(doubles)]),
        ]
        track_event = message(tag(11, LEN), body)
        return encode_rows(
            message(tag(1, LEN), [tag(8, VARINT), varints(numbers), *track_event]), rows
        )

    data = encoded(present)
    # The rows that have the optional annotation carry exactly it, and nothing more:
    # tag, size, name (2 bytes), value tag, and the value at its column's widest.
    widest = len(varint(int(numbers.max())))
    assert len(data) - len(encoded(np.zeros(rows, dtype=bool))) == int(present.sum()) * (5 + widest)
    trace = pftrace.Trace.FromString(data)
    assert len(trace.packet) == rows
    rows_out = zip(trace.packet, present.tolist(), numbers.tolist(), doubles.tolist(), strict=True)
    for packet, has, number, double in rows_out:
        assert packet.timestamp == number and packet.track_event.name_iid == number % 1000
        annotations = [
            (a.name_iid, a.int_value if a.name_iid == 3 else a.double_value)
            for a in packet.track_event.debug_annotations
        ]
        assert annotations == ([(3, number)] if has else []) + [(5, double)]


def _view(timeline: Timeline, **kw: Any) -> dict[str, Any]:
    return perfetto_view(perfetto_packets(timeline, **kw))


def _slice_key(track: str, thread: str, event: dict[str, Any]) -> tuple[Any, ...]:
    args = {
        k: v
        for k, v in event["args"].items()
        if not (v is None or (isinstance(v, float) and math.isnan(v)))
    }
    return (track, thread, event["name"], event["ts"], event["dur"], repr(sorted(args.items())))


def test_every_slice_name_arg_and_track_survives() -> None:
    timeline = mixed_timeline(3000)
    view = _view(timeline)
    processes = {p.pid: p.name for p in timeline.processes}
    threads = {
        tid: name
        for track in timeline.slices
        for tid, name in zip(track.thread_ids, track.thread_names, strict=True)
    }
    expected = Counter(
        _slice_key(
            processes[e["pid"]],
            threads[e["tid"]],
            {**e, "ts": round(e["ts"] * 1000), "dur": round(e["dur"] * 1000)},
        )
        for e in expected_events(timeline)
    )
    got = Counter(_slice_key(s["track"], s["thread"], s) for s in view["slices"])
    assert got == expected
    assert view["ends"] == len(view["slices"]) == timeline.num_slices
    # every name interned once; the read's name 0, "" (no name), is no slice's
    assert timeline.names[0] == ""
    assert sorted(view["names"].values()) == sorted(timeline.names[1:])
    cats = {s["cat"] for s in view["slices"]}
    assert cats == {"kernel", "memcpy", "memset", "sync", "activity"}
    # the args of each slice in the table's order
    kernel = next(s for s in view["slices"] if s["cat"] == "kernel")
    assert list(kernel["args"])[:2] == ["grid", "block"]


def test_compression_and_chunks_change_no_packet() -> None:
    timeline = mixed_timeline(900, seed=9)
    plain = perfetto_packets(timeline, compress=False)
    assert not any(p.HasField("compressed_packets") for p in plain)
    assert perfetto_packets(timeline) == plain
    assert _view(timeline, chunk_events=7) == _view(timeline)


def test_deflate_without_isal_is_zlibs(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from tfprof.collector.export import perfetto

    data = b"packets " * 1000
    fast = perfetto.deflate(data)
    monkeypatch.setitem(sys.modules, "isal", None)  # as if its wheel were missing
    slow = perfetto.pick_deflate()
    assert getattr(slow, "func", None) is zlib.compress
    assert zlib.decompress(fast) == zlib.decompress(slow(data)) == data
    monkeypatch.setattr(perfetto, "deflate", slow)
    timeline = mixed_timeline(300, seed=11)
    assert perfetto_packets(timeline) == perfetto_packets(timeline, compress=False)


def test_slices_go_in_deflated_packets_after_plain_descriptors() -> None:
    timeline = mixed_timeline(500, seed=10)
    from tfprof.collector.export.perfetto import PerfettoReporter

    out = io.BytesIO()
    PerfettoReporter(timeline).render(out)
    top = list(pftrace.Trace.FromString(out.getvalue()).packet)
    compressed = [p for p in top if p.HasField("compressed_packets")]
    assert compressed and top[0].HasField("clock_snapshot")
    assert all(p.HasField("track_descriptor") or p.HasField("interned_data") or p in compressed
               for p in top[1:])  # fmt: skip
    inner = pftrace.Trace.FromString(zlib.decompress(compressed[0].compressed_packets)).packet
    assert any(p.HasField("track_event") for p in inner)
    assert len(inflated(top)) > len(top)


def _fresh_interned(timeline: Timeline) -> Any:
    from tfprof.collector.export.perfetto import PerfettoReporter

    return PerfettoReporter(timeline)._interned


def test_a_gathered_selection_encodes_each_slice_as_alone() -> None:
    from tests.unit.perfetto_readback import big_timeline
    from tfprof.collector.export.perfetto_rows import as_run, slice_packets

    timeline = big_timeline(300)
    track = timeline.slices[0]
    uuids = np.arange(1, track.num_lanes + 1, dtype=np.int64)
    sel = np.array([5, 3, 40, 41, 42, 90, 7])  # neither sorted nor one run
    assert as_run(sel) is sel
    assert as_run(np.arange(4, 9)) == slice(4, 9)
    assert not isinstance(as_run(np.array([4, 6, 5, 7])), slice)  # the span of a run, not one
    assert len(timeline.slices[0]) > 90
    parsed = pftrace.Trace.FromString  # rows alone are narrower: compare the messages
    together = slice_packets(track, sel, uuids, _fresh_interned(timeline))
    interned = _fresh_interned(timeline)
    alone = b"".join(slice_packets(track, np.array([i]), uuids, interned) for i in sel.tolist())
    assert parsed(together) == parsed(alone)
    run = slice_packets(track, np.arange(10, 60), uuids, _fresh_interned(timeline))
    interned = _fresh_interned(timeline)
    assert parsed(run) == parsed(
        b"".join(slice_packets(track, np.array([i]), uuids, interned) for i in range(10, 60))
    )


def _stream_track(rows: list[dict[str, int]]) -> Any:
    from tests.unit.merge_rows import stream
    from tfprof.collector.jobdata import JobData
    from tfprof.collector.merged.whole import build_timeline

    timeline = build_timeline([JobData("j", "r", [stream(rows)])])
    return next(t for t in timeline.slices if t.name.endswith("stream:7"))


def test_a_chunk_of_several_kinds_goes_a_kind_at_a_time_unless_times_touch() -> None:
    """A stream's kernels, copies and memsets are encoded a kind at a time (rows of one
    kind are all as wide), unless one kind's slice begins when another's begins or ends:
    trace_processor orders equal times by the file, so those keep their time order."""
    from tests.unit.merge_rows import kernel, memcpy, memset
    from tfprof.collector.export.perfetto_rows import kind_blocks

    apart = [kernel(0, 10), memcpy(20, 5), kernel(30, 10), memset(50, 5), kernel(60, 10)]
    track = _stream_track(apart)
    assert [b.tolist() for b in kind_blocks(track, 0, 5)] == [[0, 2, 4], [1], [3]]
    assert [b.tolist() for b in kind_blocks(track, 1, 4)] == [[2], [1], [3]]
    # A kernel ending as the next kernel begins: one kind, no order to keep.
    same_kind = _stream_track([kernel(0, 10), kernel(10, 10), memcpy(30, 5)])
    assert [b.tolist() for b in kind_blocks(same_kind, 0, 3)] == [[0, 1], [2]]
    # Slices that overlap (two lanes): the one starting as another ends is not the next.
    overlapping = _stream_track([kernel(0, 20), kernel(5, 20), memcpy(40, 5)])
    assert [b.tolist() for b in kind_blocks(overlapping, 0, 3)] == [[0, 1], [2]]
    for touching in (
        [kernel(0, 10), memcpy(10, 5), kernel(30, 10)],  # a copy begins as a kernel ends
        [memcpy(0, 10), kernel(10, 5), memcpy(30, 10)],  # a kernel begins as a copy ends
        [kernel(0, 10), memset(0, 0), kernel(30, 10)],  # a memset begins with a kernel
        [kernel(0, 20), kernel(5, 30), memcpy(20, 5)],  # ... as an overlapped kernel ends
    ):
        track = _stream_track(touching)
        assert [b.tolist() for b in kind_blocks(track, 0, 3)] == [[0, 1, 2]]


def test_slices_of_kinds_encoded_apart_read_back_as_in_time_order() -> None:
    """Read as trace_processor reads them, a stream encoded a kind at a time gives the
    slices that one time-ordered run gives."""
    from tests.unit.merge_rows import kernel, memcpy, memset, stream
    from tfprof.collector.jobdata import JobData
    from tfprof.collector.merged.whole import build_timeline

    rng = np.random.default_rng(12)
    makers: list[Callable[[int, int], dict[str, int]]] = [kernel, memcpy, memset]
    rows, t = [], 0
    for _ in range(600):
        duration = int(rng.integers(1, 50))
        rows.append(makers[int(rng.integers(0, 3))](t, duration))
        t += duration + int(rng.integers(0, 3))  # touching now and then
    timeline = build_timeline([JobData("j", "r", [stream(rows)])])
    view = _view(timeline, chunk_events=40)
    on_stream = [s for s in view["slices"] if s["track"].endswith("stream:7")]
    category = {
        RecordKind.KERNEL: "kernel",
        RecordKind.MEMCPY: "memcpy",
        RecordKind.MEMSET: "memset",
    }
    assert [(s["ts"], s["dur"], s["cat"]) for s in on_stream] == [
        (r["start_ns"] - rows[0]["start_ns"], r["duration_ns"], category[RecordKind(r["kind"])])
        for r in rows
    ]
