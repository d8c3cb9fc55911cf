"""Timelines rendered as Perfetto packets and read back, and a large timeline to render."""

from __future__ import annotations

import io
import zlib
from typing import Any

import numpy as np
import pytest

from tests.unit.pftrace_tracks import PftraceTracks
from tests.unit.sample_timeline import T0
from tfprof.collector.jobdata import JobData, StreamData
from tfprof.collector.merged.whole import WholeTimeline as Timeline
from tfprof.collector.merged.whole import build_timeline
from tfprof.core.records import RecordKind

pftrace = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")


def perfetto_packets(timeline: Timeline, **kw: Any) -> list[Any]:
    from tfprof.collector.export.perfetto import PerfettoReporter

    buf = io.BytesIO()
    PerfettoReporter(timeline, **kw).render(buf)
    return inflated(pftrace.Trace.FromString(buf.getvalue()).packet)


def inflated(packets: Any) -> list[Any]:
    """The packets, those inside ``compressed_packets`` in their place (deflate, as
    trace_processor inflates them)."""
    out: list[Any] = []
    for p in packets:
        if p.HasField("compressed_packets"):
            out += pftrace.Trace.FromString(zlib.decompress(p.compressed_packets)).packet
        else:
            out.append(p)
    return out


def perfetto_view(packets: list[Any]) -> dict[str, Any]:
    """Resolve interning: slices as dicts with their process and thread names and their
    duration (begin and end paired per track), counters per track. Slices are read as
    trace_processor reads them: sorted by timestamp, in the file's order among equal
    ones (its TraceSorter), an end closing the track's latest open slice."""
    names: dict[int, str] = {}
    cats: dict[int, str] = {}
    ann: dict[int, str] = {}
    strings: dict[int, str] = {}
    tracks = PftraceTracks(packets)
    begins: list[dict[str, Any]] = []
    open_slices: dict[int, list[dict[str, Any]]] = {}
    ends = 0
    counter_values: dict[str, list[float]] = {}
    events: list[Any] = []
    for p in packets:
        assert p.trusted_packet_sequence_id == 1
        if p.HasField("interned_data"):
            names.update((e.iid, e.name) for e in p.interned_data.event_names)
            cats.update((e.iid, e.name) for e in p.interned_data.event_categories)
            ann.update((e.iid, e.name) for e in p.interned_data.debug_annotation_names)
            strings.update(
                (e.iid, e.str.decode()) for e in p.interned_data.debug_annotation_string_values
            )
        if p.HasField("track_event"):
            events.append(p)
    for p in sorted(events, key=lambda p: p.timestamp):  # stable: the file's order in ties
        ev = p.track_event
        if ev.type == ev.TYPE_SLICE_BEGIN:
            args = {}
            for a in ev.debug_annotations:
                which = a.WhichOneof("value")
                value = getattr(a, which)
                args[ann[a.name_iid]] = strings[value] if which == "string_value_iid" else value
            track, thread = tracks.lanes[ev.track_uuid]
            begin = {
                "track": track,
                "thread": thread,
                "name": names[ev.name_iid],
                "cat": cats[ev.category_iids[0]],
                "ts": p.timestamp,
                "args": args,
            }
            begins.append(begin)
            open_slices.setdefault(ev.track_uuid, []).append(begin)
        elif ev.type == ev.TYPE_SLICE_END:
            ends += 1
            begin = open_slices[ev.track_uuid].pop()
            begin["dur"] = p.timestamp - begin["ts"]
        elif ev.type == ev.TYPE_COUNTER:
            row, series = tracks.counters[ev.track_uuid]
            value = (
                ev.double_counter_value if ev.HasField("double_counter_value") else ev.counter_value
            )
            counter_values.setdefault(f"{row}:{series}", []).append(value)
    return {"slices": begins, "ends": ends, "counters": counter_values, "names": names}


def big_timeline(n: int, names: int = 50) -> Timeline:
    rng = np.random.default_rng(1)
    cols = {c: np.zeros(n, dtype=np.int64) for c in StreamData("j", "r", "h", 1, "0").records}
    cols["kind"][:] = RecordKind.KERNEL
    cols["start_ns"] = T0 + np.arange(n, dtype=np.int64) * 1000
    cols["duration_ns"][:] = 500
    cols["stream"] = rng.integers(7, 10, n)
    cols["name"] = rng.integers(1, names + 1, n)
    cols["correlation"] = np.arange(n)
    stream = StreamData(
        "j", "r", "h", 1, "0", strings=["", *(f"k{i}" for i in range(names))], records=cols
    )
    return build_timeline([JobData("j", "r", [stream])])
