"""Every format renders a timeline whose tracks go on across parts as it renders the
timeline whole.

A streamed export cuts a process into time parts: the same track (key, process, lanes)
in several parts, a later part adding lanes, a launch flow's call in one part and its
kernel in another. Whole timelines of the shipped traces are cut into time parts
(``split_parts``) and both are rendered in all four formats, then read back: Chrome's
events as a multiset (each process and thread declared once), Perfetto's descriptors
(each once), slices with their flows and counters, XPlane's planes, lines and events
(one plane per GPU, one line per stream or thread), StepStats' devices and nodes (one
device per track). Ids the formats intern as they go (Perfetto's categories and
strings, XPlane's metadata) are resolved to what they name before comparing.
"""

from __future__ import annotations

import gc
import io
import json
import weakref
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from google.protobuf import text_format

from tests.unit.perfetto_readback import inflated
from tests.unit.split_parts import split_parts
from tfprof.collector.export.chrome import ChromeReporter
from tfprof.collector.export.output import PIPELINE_DEPTH
from tfprof.collector.export.perfetto import PerfettoReporter
from tfprof.collector.export.stepstats import StepStatsReporter
from tfprof.collector.export.xplane import XPlaneReporter
from tfprof.collector.store.importer import jobs_from_files
from tfprof.collector.timeline.build import build_timeline
from tfprof.collector.timeline.model import PartedTimeline, Timeline, TimelinePart
from tfprof.readers.tfprotos import step_stats, xplane

pftrace = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"
NCCL = "kineto-hta-dist/nccl_allreduce_rank0_of2.json.gz"  # flows, ops, NCCL kernels
TF = "tf-timeline-ikhlestov/GPU_timeline_01.json"  # a TF timeline: op-named slices
MEMORY = "tracelens/h100__gaunernst_bert-small-uncased__1016001.json.gz"  # memory counters
CASES = {
    "nccl": [NCCL],
    "tf": [TF],
    "memory": [MEMORY],
    "merged": [NCCL, TF, MEMORY],  # three jobs: planes and host lines of several tasks
}
PARTS = 5
# Small chunks, so a part's share of a track is written in several.
CHUNK = 97

_cache: dict[tuple[str, str], Timeline] = {}


def whole_timeline(case: str, group_by: str) -> Timeline:
    key = (case, group_by)
    if key not in _cache:
        paths = [TRACES / name for name in CASES[case]]
        jobs = jobs_from_files(paths, as_steps=False)
        _cache[key] = build_timeline(jobs, group_by=group_by)  # type: ignore[arg-type]
    return _cache[key]


def rendered(reporter: Callable[[PartedTimeline | Timeline], Any], timeline: Any) -> bytes:
    out = io.BytesIO()
    reporter(timeline).render(out)
    return out.getvalue()


def both(
    case: str, group_by: str, parts: int, reporter: Callable[[Any], Any]
) -> tuple[bytes, bytes]:
    """The case rendered whole and split into ``parts`` time parts."""
    timeline = whole_timeline(case, group_by)
    return rendered(reporter, timeline), rendered(reporter, split_parts(timeline, parts))


# Each case in five parts, grouped by job and by GPU; and one in parts of a few slices,
# some holding the ends of flows whose calls all lie in earlier parts.
FINE = 200
ALL = pytest.mark.parametrize(
    "case,group_by,parts",
    [(c, g, PARTS) for c in CASES for g in ("job", "gpu")] + [("memory", "job", FINE)],
)


def test_the_split_timeline_goes_on_across_parts() -> None:
    """What the comparisons rest on: tracks in several parts, lanes added by a later
    part, flows whose two ends lie in two parts."""
    timeline = whole_timeline("merged", "job")
    parts = list(split_parts(timeline, PARTS).parts())
    assert len(parts) == PARTS
    seen: Counter[Any] = Counter((t.pid, t.key) for part in parts for t in part.slices)
    assert max(seen.values()) == PARTS
    lanes: dict[Any, int] = {}
    added = 0
    for part in parts:
        for t in part.slices:
            before = lanes.get((t.pid, t.key))
            added += before is not None and t.num_lanes > before
            lanes[(t.pid, t.key)] = t.num_lanes
    assert added > 0
    where: dict[int, int] = {}
    for j, part in enumerate(parts):
        where.update((i, j) for i in part.starts.id.tolist())
    crossing = sum(where[i] != j for j, part in enumerate(parts) for i in part.ends.id.tolist())
    assert crossing > 0
    assert sum(len(p.starts) for p in parts) == sum(len(p.ends) for p in parts)
    assert sum(len(p.ends) for p in parts) == len(timeline.flows) > 0
    fine = list(split_parts(whole_timeline("memory", "job"), FINE).parts())
    assert any(len(p.ends) and not len(p.starts) for p in fine)
    assert sum(len(c.time_ns) for p in parts for c in p.counters) == sum(
        len(c.time_ns) for c in timeline.counters
    ) > 0  # fmt: skip


# --- Chrome -------------------------------------------------------------------------


def chrome_view(data: bytes) -> tuple[list[bytes], Counter[bytes], Any]:
    doc = json.loads(data)
    events = [orjson.dumps(e, option=orjson.OPT_SORT_KEYS) for e in doc["traceEvents"]]
    declared = sorted(e for e, raw in zip(events, doc["traceEvents"], strict=True)
                      if raw["ph"] == "M")  # fmt: skip
    others = Counter(e for e, raw in zip(events, doc["traceEvents"], strict=True)
                     if raw["ph"] != "M")  # fmt: skip
    return declared, others, doc["otherData"]


@ALL
def test_chrome_split_is_whole(case: str, group_by: str, parts: int) -> None:
    whole, split = both(case, group_by, parts, lambda t: ChromeReporter(t, chunk_events=CHUNK))
    w_declared, w_events, w_meta = chrome_view(whole)
    s_declared, s_events, s_meta = chrome_view(split)
    # Each process and thread declared once, as whole.
    assert s_declared == w_declared
    assert s_events == w_events
    flows = Counter(orjson.loads(e)["ph"] for e in s_events.elements())
    assert flows["s"] == flows["f"] == len(whole_timeline(case, group_by).flows)
    assert s_meta == w_meta


# --- Perfetto ------------------------------------------------------------------------


def perfetto_view(data: bytes) -> dict[str, Any]:
    """Descriptors, slice begins (interned ids resolved, with their flows), slice ends and
    counter values, each as a multiset. A counter track's uuid and rank follow the
    order counters are first seen in: it is named by its row and name instead."""
    packets = inflated(pftrace.Trace.FromString(data).packet)
    names: dict[int, str] = {}
    cats: dict[int, str] = {}
    ann: dict[int, str] = {}
    strings: dict[int, str] = {}
    descriptors: list[bytes] = []
    begins: Counter[Any] = Counter()
    ends: Counter[Any] = Counter()
    counters: Counter[Any] = Counter()
    counter_names: dict[int, tuple[int, str]] = {}
    for p in packets:
        if p.HasField("interned_data"):
            d = p.interned_data
            names.update((e.iid, e.name) for e in d.event_names)
            cats.update((e.iid, e.name) for e in d.event_categories)
            ann.update((e.iid, e.name) for e in d.debug_annotation_names)
            strings.update((e.iid, e.str.decode()) for e in d.debug_annotation_string_values)
        if p.HasField("track_descriptor"):
            d = type(p.track_descriptor)()
            d.CopyFrom(p.track_descriptor)
            if d.HasField("counter"):
                counter_names[d.uuid] = (d.parent_uuid, d.name)
                d.ClearField("uuid")
                d.ClearField("sibling_order_rank")
            descriptors.append(d.SerializeToString(deterministic=True))
        if not p.HasField("track_event"):
            continue
        ev = p.track_event
        if ev.type == ev.TYPE_SLICE_BEGIN:
            args = []
            for a in ev.debug_annotations:
                which = a.WhichOneof("value")
                value = getattr(a, which)
                args.append((ann[a.name_iid], strings[value] if which == "string_value_iid"
                             else value))  # fmt: skip
            begins[
                (
                    p.timestamp,
                    ev.track_uuid,
                    names[ev.name_iid],
                    tuple(cats[c] for c in ev.category_iids),
                    tuple(sorted(args, key=repr)),
                    tuple(sorted(ev.flow_ids)),
                    tuple(ev.terminating_flow_ids),
                )
            ] += 1
        elif ev.type == ev.TYPE_SLICE_END:
            ends[(p.timestamp, ev.track_uuid)] += 1
        else:
            value = ev.double_counter_value if ev.HasField("double_counter_value") else (
                ev.counter_value)  # fmt: skip
            counters[(p.timestamp, counter_names[ev.track_uuid], value)] += 1
    return {"descriptors": descriptors, "begins": begins, "ends": ends, "counters": counters}


@ALL
def test_perfetto_split_is_whole(case: str, group_by: str, parts: int) -> None:
    whole, split = both(case, group_by, parts, lambda t: PerfettoReporter(t, chunk_events=CHUNK))
    w, s = perfetto_view(whole), perfetto_view(split)
    # Each track described once, as whole.
    assert sorted(s["descriptors"]) == sorted(w["descriptors"])
    assert s["begins"] == w["begins"]
    assert s["ends"] == w["ends"]
    assert s["counters"] == w["counters"]
    out = [i for b in s["begins"].elements() for i in b[5]]
    into = [i for b in s["begins"].elements() for i in b[6]]
    assert (
        sorted(out) == sorted(into) == list(range(1, len(whole_timeline(case, group_by).flows) + 1))
    )


# --- XPlane --------------------------------------------------------------------------


def xplane_view(data: bytes) -> list[Any]:
    """Planes in order: id, name, stats, lines in order (id, name, times, events as a
    sorted list), every metadata id resolved to its name."""
    space = xplane().XSpace.FromString(data)
    planes = []
    for plane in space.planes:
        meta = {m.id: m.name for m in plane.stat_metadata.values()}
        events = {m.id: m.name for m in plane.event_metadata.values()}

        def stats(items: Any, meta: dict[int, str] = meta) -> tuple[Any, ...]:
            out = []
            for stat in items:
                which = stat.WhichOneof("value")
                value = getattr(stat, which)
                out.append((meta[stat.metadata_id], meta[value] if which == "ref_value"
                            else value))  # fmt: skip
            return tuple(sorted(out, key=repr))

        lines = [
            (
                line.id,
                line.name,
                line.timestamp_ns,
                line.duration_ps,
                sorted(
                    (e.offset_ps, e.duration_ps, events[e.metadata_id], stats(e.stats))
                    for e in line.events
                ),
            )
            for line in plane.lines
        ]
        planes.append((plane.id, plane.name, stats(plane.stats), lines))
    return [planes, list(space.hostnames)]


@ALL
def test_xplane_split_is_whole(case: str, group_by: str, parts: int) -> None:
    whole, split = both(
        case, group_by, parts, lambda t: XPlaneReporter(t, host="h", chunk_events=CHUNK)
    )
    w, s = xplane_view(whole), xplane_view(split)
    names = [plane[1] for plane in s[0]]
    assert len(set(names)) == len(names)  # one plane per GPU, not one per part
    assert s == w


# --- StepStats -----------------------------------------------------------------------


def stepstats_view(run_metadata: Any) -> list[Any]:
    return [
        (d.device, sorted(n.SerializeToString(deterministic=True) for n in d.node_stats))
        for d in run_metadata.step_stats.dev_stats
    ]


@ALL
@pytest.mark.parametrize("text", [False, True])
def test_stepstats_split_is_whole(case: str, group_by: str, parts: int, text: bool) -> None:
    config_pb2, _ = step_stats()
    whole, split = both(
        case, group_by, parts, lambda t: StepStatsReporter(t, text=text, chunk_nodes=CHUNK)
    )
    views = []
    for data in (whole, split):
        run = config_pb2.RunMetadata()
        if text:
            text_format.Parse(data.decode(), run)
        else:
            run.ParseFromString(data)
        views.append(stepstats_view(run))
    w, s = views
    devices = [d for d, _ in s]
    assert len(set(devices)) == len(devices)  # one device per track, not one per part
    assert s == w


# --- Memory --------------------------------------------------------------------------

WRITERS: dict[str, Callable[[Any], Any]] = {
    "chrome": lambda t: ChromeReporter(t, chunk_events=CHUNK),
    "perfetto": lambda t: PerfettoReporter(t, chunk_events=CHUNK),
    "xplane": lambda t: XPlaneReporter(t, host="h", chunk_events=CHUNK),
    "stepstats": lambda t: StepStatsReporter(t, chunk_nodes=CHUNK),
}


@pytest.mark.parametrize("writer", WRITERS)
def test_a_writer_lets_go_of_each_part(writer: str) -> None:
    """A writer holds the part it renders, and views of the last few in blocks still
    being written (``PIPELINE_DEPTH``), never the parts before: whatever spans parts is
    small per-track state or spooled bytes. Checked by the parts' own slice and sample
    arrays: when a part is asked for, those of every part more than a pipeline behind
    are freed."""
    split = split_parts(whole_timeline("merged", "job"), FINE)
    held: list[list[int]] = []

    def watched(parts: Iterator[TimelinePart]) -> Iterator[TimelinePart]:
        refs: list[list[weakref.ref[Any]]] = []
        for part in parts:
            gc.collect()
            held.append([i for i, mine in enumerate(refs) if any(r() is not None for r in mine)])
            arrays = [t.start_ns for t in part.slices] + [c.time_ns for c in part.counters]
            refs.append([weakref.ref(a) for a in arrays])
            del arrays
            yield part
            del part

    timeline = PartedTimeline(
        split.group_by,
        split.origin_ns,
        watched(split.parts()),
        lambda: split.metadata,
        split.hosts,
        split.devices,
    )
    WRITERS[writer](timeline).render(io.BytesIO())
    assert len(held) == FINE
    behind = [j - i for j, alive in enumerate(held) for i in alive]
    assert max(behind, default=0) <= PIPELINE_DEPTH + 1, behind
