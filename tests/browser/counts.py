"""What a timeline file holds, counted two ways: from the file alone (its format's own
definition: Chrome JSON with ``json``, Perfetto with the ``perfetto`` package's protos)
and by the Perfetto UI's trace_processor once the UI has loaded it.

Both give a ``Counts``: slices, flows (arrows with both ends), counter samples, and the
tracks holding slices or counters, each named by its path (a process and a thread, or a
custom track under its parents), with how many slices or samples each holds.
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.browser.perfetto_ui import PerfettoPage

Path_ = tuple[str, ...]  # a track's name and its parents', from the top
_TASK = re.compile(r"/job:[^/ ]+/task:[^/ ]+")
_ROOT = re.compile(r"/job:[^/]+")


@dataclass
class Counts:
    slices: int = 0
    flows: int = 0
    counters: int = 0  # samples
    slice_tracks: Counter[Path_] = field(default_factory=Counter)  # slices per track
    counter_tracks: Counter[Path_] = field(default_factory=Counter)  # samples per track

    @property
    def tasks(self) -> set[str]:
        """The ``/job:J/task:T`` the tracks' names say they belong to."""
        paths = [*self.slice_tracks, *self.counter_tracks]
        return {m.group(0) for path in paths for name in path for m in _TASK.finditer(name)}

    def row(self) -> dict[str, int | str]:
        """The figures of a table row."""
        tasks = self.tasks
        return {
            "slices": self.slices,
            "flows": self.flows,
            "counter samples": self.counters,
            "counter tracks": len(self.counter_tracks),
            "slice tracks": len(self.slice_tracks),
            "jobs/tasks": f"{len({t.split('/task:')[0] for t in tasks})}/{len(tasks)}",
        }


def combined(parts: list[Counts]) -> Counts:
    """What files together hold (tracks of different files kept apart by their names)."""
    out = Counts()
    for part in parts:
        out.slices += part.slices
        out.flows += part.flows
        out.counters += part.counters
        out.slice_tracks += part.slice_tracks
        out.counter_tracks += part.counter_tracks
    return out


def file_counts(path: Path) -> Counts:
    if path.name.endswith((".pftrace", ".perfetto-trace")):
        return _perfetto_counts(path)
    return _chrome_counts(path)


def _chrome_counts(path: Path) -> Counts:
    raw = path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    events: list[dict[str, Any]] = doc["traceEvents"] if isinstance(doc, dict) else doc
    procs = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    threads = {
        (e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("name") == "thread_name"
    }
    out = Counts()
    ends: dict[str, set[Any]] = {"s": set(), "f": set()}
    for e in events:
        ph = e.get("ph")
        if ph == "X":
            out.slices += 1
            pid, tid = e["pid"], e.get("tid")
            out.slice_tracks[(procs.get(pid, ""), threads.get((pid, tid), ""))] += 1
        elif ph in ends:
            ends[ph].add((e.get("cat"), e.get("name"), e.get("id")))
        elif ph == "C":
            # trace_processor names a counter "<event name> <arg key>", one per key
            for key in e.get("args", {}):
                out.counters += 1
                out.counter_tracks[(procs.get(e["pid"], ""), f"{e['name']} {key}")] += 1
    out.flows = len(ends["s"] & ends["f"])
    return out


def packets(path: Path) -> list[Any]:
    """Every packet of a .pftrace in file order, ``compressed_packets`` inflated."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    found: list[Any] = []
    for packet in pb.Trace.FromString(path.read_bytes()).packet:
        if packet.HasField("compressed_packets"):
            found += pb.Trace.FromString(zlib.decompress(packet.compressed_packets)).packet
        else:
            found.append(packet)
    return found


def _perfetto_counts(path: Path) -> Counts:
    pkts = packets(path)
    descriptors = {p.track_descriptor.uuid: p.track_descriptor for p in pkts
                   if p.HasField("track_descriptor")}  # fmt: skip
    pids = {d.process.pid: d.process.process_name for d in descriptors.values()
            if d.HasField("process")}  # fmt: skip

    def path_of(uuid: int) -> Path_:
        d = descriptors[uuid]
        if d.HasField("thread"):
            return (pids.get(d.thread.pid, ""), d.thread.thread_name)
        if d.HasField("process"):
            return (d.process.process_name,)
        up = path_of(d.parent_uuid) if d.parent_uuid in descriptors else ()
        return (*up, d.name)

    out = Counts()
    starts: set[int] = set()
    ends: set[int] = set()
    for p in pkts:
        if not p.HasField("track_event"):
            continue
        event = p.track_event
        starts.update(event.flow_ids)
        ends.update(event.terminating_flow_ids)
        if event.type in (event.TYPE_SLICE_BEGIN, event.TYPE_INSTANT):
            out.slices += 1
            out.slice_tracks[path_of(event.track_uuid)] += 1
        elif event.type == event.TYPE_COUNTER:
            out.counters += 1
            out.counter_tracks[path_of(event.track_uuid)] += 1
    out.flows = len(starts & ends)
    return out


def row_order(path: Path) -> dict[str, list[str]]:
    """Each job root of a .pftrace and the names of its rows, in the order the file asks
    for (``sibling_order_rank``)."""
    descriptors = [p.track_descriptor for p in packets(path) if p.HasField("track_descriptor")]
    roots = {d.uuid: d.name for d in descriptors if not d.parent_uuid and _ROOT.fullmatch(d.name)}
    rows: dict[str, list[tuple[int, str]]] = {name: [] for name in roots.values()}
    for d in descriptors:
        if d.parent_uuid in roots:
            rows[roots[d.parent_uuid]].append((d.sibling_order_rank, d.name))
    return {root: [name for _, name in sorted(found)] for root, found in rows.items()}


def ui_counts(ui: PerfettoPage) -> Counts:
    """The same figures from the UI's trace_processor: slices, flows and counters, and
    each track's path (thread tracks by process and thread name, counter tracks of a
    process by its name, custom tracks by their parents' names)."""
    tracks = {r["id"]: r for r in ui.query("select id, name, parent_id from track")}
    thread_of = {r["id"]: r["utid"] for r in ui.query("select id, utid from thread_track")}
    threads = {r["utid"]: r for r in ui.query("select utid, name, upid from thread")}
    procs = {r["upid"]: r["name"] or "" for r in ui.query("select upid, name from process")}
    process_of = {
        r["id"]: r["upid"] for r in ui.query("select id, upid from process_counter_track")
    }

    def path_of(track: int) -> Path_:
        if track in thread_of:
            thread = threads[thread_of[track]]
            return (procs.get(thread["upid"], ""), thread["name"] or "")
        name = tracks[track]["name"] or ""
        if track in process_of:
            return (procs.get(process_of[track], ""), name)
        parent = tracks[track]["parent_id"]
        return (*(path_of(parent) if parent is not None else ()), name)

    out = Counts(
        slices=ui.scalar("select count(*) from slice"),
        flows=ui.scalar("select count(*) from flow"),
        counters=ui.scalar("select count(*) from counter"),
    )
    for r in ui.query("select track_id as t, count(*) as n from slice group by track_id"):
        out.slice_tracks[path_of(r["t"])] += r["n"]
    for r in ui.query(
        "select t.id as t, count(c.id) as n from counter_track t "
        "left join counter c on c.track_id = t.id group by t.id"
    ):
        out.counter_tracks[path_of(r["t"])] += r["n"]
    return out


# Import problems: what the UI counts as errors (severity other than 'info'), and the
# losses trace_processor files under 'info' (a flow end without its start, a counter on a
# track without a counter descriptor, a JSON event it could not parse, an end event that
# matched no begin).
PROBLEMS_SQL = (
    "select name, severity, value from stats where value > 0 and ("
    "severity != 'info' or name glob 'flow_*' or name glob '*error*' or name glob '*fail*' "
    "or name glob '*misplaced*' or name glob '*invalid*' or name glob '*without*' "
    "or name glob '*mismatch*') order by name"
)


def problems(ui: PerfettoPage) -> list[str]:
    """The stats rows that say something of the file was not imported."""
    return [f"{r['name']}={r['value']} ({r['severity']})" for r in ui.query(PROBLEMS_SQL)]


def group_titles(ui: PerfettoPage) -> list[str]:
    """The titles of the UI's top-level track groups, in the order shown."""
    return [node[0] for node in ui.track_tree()]
