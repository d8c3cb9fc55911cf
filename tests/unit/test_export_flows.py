"""Launch flows, host slices and memory counters in the Chrome and Perfetto exports, read
back from our own files (JSON with json, Perfetto with the perfetto package's classes)."""

from __future__ import annotations

import gzip
import io
import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.traces import shared_traces
from tests.unit.merge_rows import STRINGS, kernel, stream
from tests.unit.pftrace_tracks import PftraceTracks
from tfprof.collector.export.chrome import ChromeReporter
from tfprof.collector.jobdata import JobData
from tfprof.collector.merged.whole import WholeTimeline as Timeline
from tfprof.collector.merged.whole import build_timeline
from tfprof.collector.store.importer import jobs_from_files
from tfprof.core.records import RecordKind
from tfprof.core.slice_args import BY_KIND, SLICE_CATEGORIES, args_of

pftrace = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")

KINETO = ["simple_add.json.gz", "event_sync_multi_stream.json.gz"]
_RAW_GPU = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_sync")
_GPU_CATS = {"kernel", "memcpy", "memset", "sync"}
_API_ARGS = {"cbid", "return value", "api", "correlation", "external id"}


def _kineto(name: str) -> Path:
    return shared_traces() / "kineto-hta" / name


def _raw(path: Path) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    return events


def _partnered(path: Path) -> Counter[int]:
    """Correlations of the file's GPU records whose runtime call is in the file (once)."""
    raw = _raw(path)
    runtime = Counter(e["args"]["correlation"] for e in raw if e.get("cat") == "cuda_runtime")
    return Counter(
        e["args"]["correlation"]
        for e in raw
        if e.get("cat") in _RAW_GPU
        and e.get("ph") == "X"
        and runtime[e["args"]["correlation"]] == 1
    )


def _timeline(*paths: Path, group_by: str = "job") -> Timeline:
    return build_timeline(jobs_from_files(list(paths), as_steps=False), group_by=group_by)  # type: ignore[arg-type]


def chrome(timeline: Timeline, chunk_events: int = 1 << 16) -> dict[str, Any]:
    buf = io.BytesIO()
    ChromeReporter(timeline, chunk_events=chunk_events).render(buf)
    doc: dict[str, Any] = json.loads(buf.getvalue())
    return doc


def chrome_flows(doc: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(API slice, GPU slice) of every flow, each end bound as viewers bind it: to the
    slice on its thread that encloses its time (the latest to start, as the topmost)."""
    events = doc["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    threads = {
        (e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("name") == "thread_name"
    }
    by_thread: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for e in events:
        if e["ph"] == "X":
            e["thread"] = f"{procs[e['pid']]} {threads[(e['pid'], e['tid'])]}"
            by_thread.setdefault((e["pid"], e["tid"]), []).append(e)

    def enclosing(end: dict[str, Any]) -> dict[str, Any]:
        on = by_thread[(end["pid"], end["tid"])]
        found = [e for e in on if e["ts"] <= end["ts"] <= e["ts"] + e["dur"]]
        return max(found, key=lambda e: e["ts"])

    starts = [e for e in events if e["ph"] == "s"]
    ends = [e for e in events if e["ph"] == "f"]
    assert all(e["bp"] == "e" and e["cat"] == e["name"] == "launch" for e in ends)
    assert len({e["id"] for e in starts}) == len(starts)  # ids never repeat ...
    assert len({e["id"] for e in ends}) == len(ends)
    assert {e["id"] for e in starts} == {e["id"] for e in ends}  # ... and pair up
    start_of = {e["id"]: enclosing(e) for e in starts}
    return [(start_of[e["id"]], enclosing(e)) for e in ends]


def perfetto(timeline: Timeline, **kw: Any) -> list[Any]:
    from tests.unit.perfetto_readback import inflated
    from tfprof.collector.export.perfetto import PerfettoReporter

    buf = io.BytesIO()
    PerfettoReporter(timeline, **kw).render(buf)
    return inflated(pftrace.Trace.FromString(buf.getvalue()).packet)


def perfetto_slices(packets: list[Any]) -> list[dict[str, Any]]:
    """Slice begins with names, categories and args resolved, and their flow ids."""
    names: dict[int, str] = {}
    cats: dict[int, str] = {}
    ann: dict[int, str] = {}
    strings: dict[int, str] = {}
    tracks = PftraceTracks(packets)
    threads = {uuid: f"{proc} {thread}" for uuid, (proc, thread) in tracks.lanes.items()}
    out: list[dict[str, Any]] = []
    for p in packets:
        interned = p.interned_data
        names.update((e.iid, e.name) for e in interned.event_names)
        cats.update((e.iid, e.name) for e in interned.event_categories)
        ann.update((e.iid, e.name) for e in interned.debug_annotation_names)
        strings.update((e.iid, e.str.decode()) for e in interned.debug_annotation_string_values)
        ev = p.track_event
        if p.HasField("track_event") and ev.type == ev.TYPE_SLICE_BEGIN:
            args = {}
            for a in ev.debug_annotations:
                which = a.WhichOneof("value")
                value = getattr(a, which)
                args[ann[a.name_iid]] = strings[value] if which == "string_value_iid" else value
            out.append(
                {
                    "thread": threads[ev.track_uuid],
                    "name": names[ev.name_iid],
                    "cat": cats[ev.category_iids[0]],
                    "ts": p.timestamp,
                    "args": args,
                    "out": list(ev.flow_ids),
                    "in": list(ev.terminating_flow_ids),
                }
            )
    return out


def perfetto_flows(slices: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    starts = [(i, s) for s in slices for i in s["out"]]
    ends = [(i, s) for s in slices for i in s["in"]]
    assert len({i for i, _ in starts}) == len(starts)
    assert len({i for i, _ in ends}) == len(ends)
    start_of = dict(starts)
    assert set(start_of) == {i for i, _ in ends}
    assert all(len(s["in"]) <= 1 for s in slices)
    return [(start_of[i], s) for i, s in ends]


def _check_flows(
    flows: list[tuple[dict[str, Any], dict[str, Any]]], partnered: Counter[int]
) -> None:
    for api, gpu in flows:
        assert api["cat"] == "cuda_api" and "/cpu " in api["thread"] and "thread:" in api["thread"]
        assert gpu["cat"] in _GPU_CATS and "/stream:" in gpu["thread"]  # not the memcpy repeat
        assert api["args"]["correlation"] == gpu["args"]["correlation"]
        assert api["ts"] <= gpu["ts"]
    assert Counter(gpu["args"]["correlation"] for _, gpu in flows) == partnered
    ended = Counter(id(gpu) for _, gpu in flows)
    assert max(ended.values()) == 1  # one flow per GPU record


@pytest.mark.parametrize("group_by", ["job", "gpu"])
@pytest.mark.parametrize("name", KINETO)
def test_every_partnered_gpu_record_has_one_chrome_flow(name: str, group_by: str) -> None:
    path = _kineto(name)
    partnered = _partnered(path)
    assert sum(partnered.values()) > 0
    flows = chrome_flows(chrome(_timeline(path, group_by=group_by), chunk_events=50))
    _check_flows(flows, partnered)


@pytest.mark.parametrize("group_by", ["job", "gpu"])
@pytest.mark.parametrize("name", KINETO)
def test_every_partnered_gpu_record_has_one_perfetto_flow(name: str, group_by: str) -> None:
    path = _kineto(name)
    timeline = _timeline(path, group_by=group_by)
    flows = perfetto_flows(perfetto_slices(perfetto(timeline, chunk_events=50)))
    _check_flows(flows, _partnered(path))


def test_flow_ids_are_unique_across_jobs_of_a_merged_export() -> None:
    paths = [_kineto(n) for n in KINETO]
    timeline = _timeline(*paths)
    flows = chrome_flows(chrome(timeline))  # asserts the ids are unique and paired
    jobs = [Counter(g["args"]["correlation"] for a, g in flows if name in a["thread"])
            for name in ("simple_add", "event_sync")]  # fmt: skip
    assert set(jobs[0]) & set(jobs[1])  # correlations repeat across jobs; flow ids do not
    for api, gpu in flows:
        assert gpu["thread"].split("/")[1] == api["thread"].split("/")[1]  # never across jobs
    assert [sum(j.values()) for j in jobs] == [sum(_partnered(p).values()) for p in paths]
    pf = perfetto_flows(perfetto_slices(perfetto(timeline)))
    assert len(pf) == len(flows) == len(timeline.flows)


def _graph_launch_timeline() -> Timeline:
    """A graph launch (one call, twelve kernels of its correlation), a plain launch, a
    kernel with no correlation and one whose call is missing."""
    api = {"kind": RecordKind.API, "duration_ns": 3, "thread": 42, "name": 2, "cbid": 311,
           "category": 1}  # fmt: skip
    rows = [
        {**api, "start_ns": 0, "correlation": 5, "external_id": 77},
        {**api, "start_ns": 4, "correlation": 6, "return_value": 2},
        *(kernel(10 + 3 * i, 2, correlation=5) for i in range(12)),
        kernel(60, 2, correlation=6),
        kernel(70, 2, correlation=0),
        kernel(80, 2, correlation=9),
    ]
    return build_timeline([JobData("train", "r1", [stream(rows)])])


@pytest.mark.parametrize("chunk", [1, 4, 1 << 14])
def test_a_graph_launch_draws_one_flow_per_kernel(chunk: int) -> None:
    timeline = _graph_launch_timeline()
    assert STRINGS[2] == "relu_kernel"  # the calls' name in this hand-made stream
    slices = perfetto_slices(perfetto(timeline, chunk_events=chunk))
    calls = [s for s in slices if s["cat"] == "cuda_api"]
    assert [len(s["out"]) for s in calls] == [12, 1]
    args = [{"cbid": 311, "return value": r, "api": "cuda_runtime", "correlation": c} for r, c in
            ((0, 5), (2, 6))]  # fmt: skip
    args[0]["external id"] = 77  # written only where there is one
    assert [s["args"] for s in calls] == args
    doc = chrome(timeline, chunk_events=chunk)
    assert [e["args"] for e in doc["traceEvents"] if e.get("cat") == "cuda_api"] == args
    flows = perfetto_flows(slices)
    assert Counter(g["args"]["correlation"] for _, g in flows) == {5: 12, 6: 1}
    chrome_pairs = chrome_flows(chrome(timeline, chunk_events=chunk))
    assert Counter(g["args"]["correlation"] for _, g in chrome_pairs) == {5: 12, 6: 1}
    assert timeline.metadata["host_side"]["flows"]["unknown_correlation"] == 1
    assert timeline.metadata["host_side"]["flows"]["missing_api"] == 1


def test_perfetto_slices_do_not_depend_on_the_chunk_size() -> None:
    timeline = _graph_launch_timeline()

    def view(chunk: int) -> list[tuple[Any, ...]]:
        rows = perfetto_slices(perfetto(timeline, chunk_events=chunk))
        return [(s["name"], s["cat"], s["ts"], sorted(s["args"].items()), s["out"], s["in"])
                for s in rows]  # fmt: skip

    assert view(1) == view(3) == view(1 << 14)


def test_host_slices_carry_call_args_and_range_categories() -> None:
    path = _kineto("simple_add.json.gz")
    raw = _raw(path)
    timeline = _timeline(path)
    doc = chrome(timeline)
    host = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] not in _GPU_CATS]
    ranges = Counter(e["cat"] for e in raw if e.get("cat") in ("cpu_op", "user_annotation"))
    calls = [e for e in raw if e.get("cat") == "cuda_runtime"]
    assert Counter(e["cat"] for e in host) == {"cuda_api": len(calls), **ranges}
    for e in host:
        if e["cat"] == "cuda_api":
            assert set(e["args"]) <= _API_ARGS and {"cbid", "correlation"} <= set(e["args"])
            assert e["args"]["api"] == "cuda_runtime" and e["args"]["return value"] == 0
        else:
            assert set(e["args"]) <= {"external id"}  # no device, stream or context

    def call(e: dict[str, Any], external: str) -> tuple[Any, ...]:
        args = e["args"]
        return e["name"], args["cbid"], args["correlation"], args.get(external, 0)

    ours = Counter(call(e, "external id") for e in host if e["cat"] == "cuda_api")
    assert ours == Counter(call(e, "External id") for e in calls)
    pf = [s for s in perfetto_slices(perfetto(timeline)) if s["cat"] not in _GPU_CATS]

    def same(e: dict[str, Any]) -> tuple[Any, ...]:
        return e["name"], e["cat"], tuple(sorted(e["args"].items()))

    assert Counter(map(same, pf)) == Counter(map(same, host))


def test_tf_timeline_op_ranges_keep_their_category() -> None:
    path = shared_traces() / "tf-timeline-ikhlestov" / "GPU_timeline_02_step_0.json"
    timeline = build_timeline(jobs_from_files([path], as_steps=False))
    doc = chrome(timeline)
    cats = Counter(e["cat"] for e in doc["traceEvents"] if e["ph"] == "X")
    assert cats["tf_op"] == 81 and "marker" not in cats and "activity" not in cats
    assert Counter(s["cat"] for s in perfetto_slices(perfetto(timeline))) == cats


def test_memory_counter_in_both_formats(tmp_path: Path) -> None:
    def memory(ts: int, nbytes: int) -> dict[str, Any]:
        args = {"Device Type": 1, "Device Id": 0, "Addr": 4096 + ts, "Bytes": nbytes}
        return {"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 2, "ts": ts, "args": args}

    kernel_event = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 5,
                    "dur": 1, "args": {"device": 0, "stream": 7, "correlation": 0}}  # fmt: skip
    events = [kernel_event, memory(1, 1000), memory(2, 500), memory(4, -1000), memory(6, 2000)]
    path = tmp_path / "mem.json"
    path.write_text(json.dumps({"traceEvents": events}))
    timeline = build_timeline(jobs_from_files([path], as_steps=False))
    name = "gpu:0 allocated_bytes"
    doc = chrome(timeline)
    procs = {
        e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name"
    }
    # One event per value, its name split so that viewers call it "gpu:0 allocated_bytes"
    counted = [e for e in doc["traceEvents"] if e["ph"] == "C" and e["name"] == "gpu:0"]
    assert [e["args"] for e in counted] == [{"allocated_bytes": v} for v in (1000, 1500, 500, 2500)]
    assert [e["ts"] for e in counted] == [0.0, 1.0, 3.0, 5.0]  # µs from the first event
    assert {procs[e["pid"]] for e in counted} == {"/job:mem/task:0/cpu"}
    assert doc["otherData"]["host_side"]["memory_peak_bytes"] == {"mem": {"imported/gpu:0": 2500}}
    packets = perfetto(timeline)
    (desc,) = [p.track_descriptor for p in packets if p.track_descriptor.name == name]
    assert desc.counter.unit == pftrace.CounterDescriptor.UNIT_SIZE_BYTES
    assert PftraceTracks(packets).counters[desc.uuid] == ("/job:mem/task:0/cpu", name)
    values = [(p.timestamp, p.track_event.counter_value) for p in packets
              if p.HasField("track_event") and p.track_event.track_uuid == desc.uuid]  # fmt: skip
    assert values == [(0, 1000), (1000, 1500), (3000, 500), (5000, 2500)]


def test_the_arg_table_covers_every_record_kind() -> None:
    for kind in RecordKind:
        assert kind in BY_KIND and kind in SLICE_CATEGORIES
    host_kinds = (RecordKind.API, RecordKind.MARKER, RecordKind.MEMORY)
    for kind in host_kinds:
        names = {a.name for a in args_of(kind)}
        assert not names & {"stream", "context"}  # a host record has no stream
    assert {a.name for a in args_of(RecordKind.API)} == _API_ARGS
    assert np.unique([SLICE_CATEGORIES[k] for k in RecordKind]).shape[0] == len(RecordKind)


@pytest.mark.parametrize("name", ["simple_add.json.gz", "event_sync_multi_stream.json.gz"])
def test_our_chrome_export_reads_back_with_its_host_side(name: str, tmp_path: Path) -> None:
    """`summary FILE` on our own export sees the API calls and ranges, not only the GPU."""
    from tfprof.readers import load_trace

    path = tmp_path / "ours.json"
    path.write_text(json.dumps(chrome(_timeline(_kineto(name)))))
    original, back = load_trace(str(_kineto(name))), load_trace(str(path))

    def host_rows(trace: Any) -> Counter[tuple[int, int, str, int]]:
        c = trace.columns
        return Counter(
            (int(c["kind"][i]), int(c["thread"][i]), trace.names[c["name"][i]],
             int(c["correlation"][i]))
            for i in range(len(trace))
            if c["kind"][i] in (RecordKind.API, RecordKind.MARKER) and c["device"][i] == 0
            and c["stream"][i] == 0
        )  # fmt: skip

    expected = host_rows(original)
    assert expected and host_rows(back) == expected
    kinds, cats = back.column("kind"), back.column("category")
    categories = {back.names[c] for k, c in zip(kinds, cats, strict=True) if k == RecordKind.MARKER}
    assert "cpu_op" in categories
