"""What a viewer sees in a timeline file, counted from the file alone.

The golden test (test_golden_outputs.py) reads every export back here with the format's
own definition, never with tfprof's code: Chrome JSON with ``json``, Perfetto with the
``perfetto`` package's TracePacket classes, XPlane with TensorFlow's generated
``xplane_pb2``, StepStats with TensorBoard's ``RunMetadata``. So the figures stay
comparable while the exporters are rewritten or moved.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import zlib
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

Doc = dict[str, Any]


def chrome_view(path: Path) -> Doc:
    """Slices per track (process name / thread name), flows and counters, as
    chrome://tracing or Perfetto's JSON importer shows them, and the file's metadata."""
    raw = path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if path.name.endswith(".gz") else raw)
    events: list[Doc] = doc["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    threads = {
        (e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"
    }

    def track(e: Doc) -> str:
        pid, tid = e["pid"], e.get("tid")
        return f"{procs.get(pid, f'pid {pid}')} / {threads.get((pid, tid), f'tid {tid}')}"

    tracks: dict[str, Doc] = {}
    flows: dict[str, Counter[str]] = {}
    counters: Counter[str] = Counter()
    for e in events:
        ph = e["ph"]
        if ph == "X":
            t = tracks.setdefault(track(e), {"slices": 0, "dur_us": 0.0, "by_cat": Counter()})
            t["slices"] += 1
            t["dur_us"] += e.get("dur", 0.0)
            t["by_cat"][e.get("cat", "")] += 1
        elif ph in ("s", "t", "f"):
            flows.setdefault(e.get("cat", ""), Counter())[ph] += 1
        elif ph == "C":
            counters[f"{procs.get(e['pid'], e['pid'])} / {e['name']}"] += 1
    for t in tracks.values():
        t["dur_us"] = round(t["dur_us"], 3)  # a sum of µs floats, shown to the ns
    return {
        "events_by_phase": Counter(e["ph"] for e in events),
        "tracks": tracks,
        "flows": flows,
        "counter_samples": counters,
        "other_keys": {k: v for k, v in doc.items() if k != "traceEvents"},
    }


def _perfetto_pb() -> Any:
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2

    return perfetto_trace_pb2


def perfetto_view(path: Path) -> Doc:
    """Packets, tracks, slices (begin and end paired per track in timestamp order, as
    trace_processor's sorter does), flows and counters of a .pftrace."""
    pb = _perfetto_pb()
    packets: list[Any] = []
    for p in pb.Trace.FromString(path.read_bytes()).packet:
        if p.HasField("compressed_packets"):  # deflate, as trace_processor inflates it
            packets += pb.Trace.FromString(zlib.decompress(p.compressed_packets)).packet
        else:
            packets.append(p)
    kinds: Counter[str] = Counter()
    names: dict[int, str] = {}
    descriptors: dict[int, Any] = {}
    events: list[Any] = []
    for p in packets:
        kinds[p.WhichOneof("data") or "interned_data only"] += 1
        if p.HasField("track_descriptor"):
            descriptors[p.track_descriptor.uuid] = p.track_descriptor
        if p.HasField("track_event"):
            events.append(p)
    for d in descriptors.values():
        if d.HasField("process"):
            names[d.uuid] = d.process.process_name
    pids = {d.process.pid: names[u] for u, d in descriptors.items() if d.HasField("process")}
    for u, d in descriptors.items():
        if d.HasField("thread"):
            names[u] = f"{pids.get(d.thread.pid, d.thread.pid)} / {d.thread.thread_name}"
        elif u not in names:  # a named track: under its parent's name, if it has one
            parent = names.get(d.parent_uuid, d.parent_uuid) if d.parent_uuid else None
            names[u] = d.name if parent is None else f"{parent} / {d.name}"
    tracks: dict[str, Doc] = {}
    open_at: dict[int, list[int]] = {}
    flows: Counter[str] = Counter()
    counters: Counter[str] = Counter()
    ids: set[int] = set()
    for p in sorted(events, key=lambda p: p.timestamp):  # stable: file order among ties
        ev = p.track_event
        name = names[ev.track_uuid]
        flows["flow_ids"] += len(ev.flow_ids)
        flows["terminating_flow_ids"] += len(ev.terminating_flow_ids)
        ids.update(ev.flow_ids, ev.terminating_flow_ids)
        if ev.type == ev.TYPE_SLICE_BEGIN:
            t = tracks.setdefault(name, {"slices": 0, "ended": 0, "dur_ns": 0})
            t["slices"] += 1
            open_at.setdefault(ev.track_uuid, []).append(p.timestamp)
        elif ev.type == ev.TYPE_SLICE_END:
            t = tracks[name]
            t["ended"] += 1
            t["dur_ns"] += p.timestamp - open_at[ev.track_uuid].pop()
        elif ev.type == ev.TYPE_COUNTER:
            counters[name] += 1
        else:
            flows[f"other event type {ev.type}"] += 1
    flows["distinct_ids"] = len(ids)
    return {
        "packets_by_kind": kinds,
        "track_descriptors": _descriptor_kinds(descriptors),
        "tracks": tracks,
        "flows": flows,
        "counter_samples": counters,
    }


def _descriptor_kinds(descriptors: dict[int, Any]) -> Counter[str]:
    kinds: Counter[str] = Counter()
    for d in descriptors.values():
        kind = next((k for k in ("process", "thread", "counter") if d.HasField(k)), "other")
        kinds[kind] += 1
    return kinds


def xplane_module() -> ModuleType | None:
    """TensorFlow's generated ``xplane_pb2``, loaded from its install directory on its
    own (importing ``tensorflow`` would take seconds); None without TensorFlow."""
    try:
        spec = importlib.util.find_spec("tensorflow")
    except (ImportError, ValueError):
        return None
    for location in (spec.submodule_search_locations or []) if spec else []:
        path = Path(location) / "tsl" / "profiler" / "protobuf" / "xplane_pb2.py"
        module_spec = importlib.util.spec_from_file_location("golden_xplane_pb2", path)
        if path.is_file() and module_spec is not None and module_spec.loader is not None:
            module = importlib.util.module_from_spec(module_spec)
            module_spec.loader.exec_module(module)
            return module
    return None


def _stat_value(stat: Any, plane: Any) -> Any:
    which = stat.WhichOneof("value")
    value = getattr(stat, which) if which else None
    if which == "ref_value":
        return plane.stat_metadata[value].name
    return value.hex() if isinstance(value, bytes) else value


def xplane_view(path: Path, xplane_pb2: ModuleType) -> Doc:
    """Planes with their stats, lines with their events and summed durations, as
    TensorBoard's trace viewer lists them."""
    space = xplane_pb2.XSpace.FromString(path.read_bytes())
    planes: Doc = {}
    for plane in space.planes:
        lines = {
            line.name: {
                "events": len(line.events),
                "duration_ps": line.duration_ps,
                "timestamp_ns": line.timestamp_ns,
                "event_duration_ps": sum(e.duration_ps for e in line.events),
                "event_stats": sum(len(e.stats) for e in line.events),
            }
            for line in plane.lines
        }
        planes[plane.name] = {
            "lines": lines,
            "event_metadata": len(plane.event_metadata),
            "stat_metadata": len(plane.stat_metadata),
            "stats": {
                plane.stat_metadata[s.metadata_id].name: _stat_value(s, plane) for s in plane.stats
            },
        }
    return {
        "hostnames": list(space.hostnames),
        "planes": planes,
        "errors": list(space.errors),
        "warnings": list(space.warnings),
    }


def stepstats_view(path: Path) -> Doc:
    """Node stats per device of a RunMetadata text proto, as TensorFlow's timeline tool
    reads them."""
    from google.protobuf import text_format
    from tensorboard.compat.proto import config_pb2

    run = text_format.Parse(path.read_text(encoding="utf-8"), config_pb2.RunMetadata())
    devices: Doc = {}
    for dev in run.step_stats.dev_stats:
        nodes = dev.node_stats
        devices[dev.device] = {
            "nodes": len(nodes),
            "all_end_rel_nanos": sum(n.all_end_rel_nanos for n in nodes),
            "op_end_rel_nanos": sum(n.op_end_rel_nanos for n in nodes),
            "threads": len({n.thread_id for n in nodes}),
            "labels": len({n.timeline_label for n in nodes}),
            "memory": sum(len(n.memory) for n in nodes),
            "outputs": sum(len(n.output) for n in nodes),
        }
    return {"devices": devices, "partition_graphs": len(run.partition_graphs)}
