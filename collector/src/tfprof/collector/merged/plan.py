"""The timeline's first pass: what must be known before its first slice is written.

A trace names its processes and threads before their slices (Perfetto's track
descriptors; Chrome's names and tids), and a track's thread ids are handed out a block
of its lanes at a time, in the timeline's track order. So a first pass over the records
(the columns that place a record and its times only, a time chunk at a time) finds:

- the time origin: the earliest start of a record the window keeps (whole: it may
  start before the window) or of a host sample inside it;
- every slice track, its lane count (first fit with carried state, exactly as the
  second pass lanes it), its first start, last end and slice count;
- each task's device-memory series (MEMORY records per GPU) and host samples;
- per process, its records by kind in the window and their time range (metadata).

``TimelinePlan.layout`` then places tracks and counters as the timeline always placed
them (``Layout``), task by task: GPU tracks (by GPU, memcpy last, streams numerically),
the host counters, the memory counters, the host thread tracks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from tfprof.collector.jobdata import HOST_COLUMNS
from tfprof.collector.lake.lake_stream import GPU_TABLES, HOST_TABLES
from tfprof.collector.merged.host_links import CallFlows, Settle
from tfprof.collector.merged.track_rows import PLACING, Task, TrackRows
from tfprof.collector.read.engine import Read
from tfprof.collector.read.host_launches import LAUNCH_COLUMNS
from tfprof.collector.read.lake_catalog import Catalog
from tfprof.collector.read.time_chunks import Chunk
from tfprof.collector.timeline.lanes import CarriedLanes
from tfprof.collector.timeline.layout import Layout
from tfprof.collector.timeline.model import (
    CounterPlace,
    GroupBy,
    TimelineLayout,
    TrackPlace,
)
from tfprof.collector.timeline.prepare import HOST_SERIES
from tfprof.collector.timeline.untraced_spans import UNTRACED_THREAD, untraced_spans
from tfprof.core.counters import memory_counter
from tfprof.core.records import RecordKind
from tfprof.core.tracks import TrackKey, TrackKind

RECORD_TABLES = (*GPU_TABLES, *HOST_TABLES)
KINDS = int(RecordKind.MEMORY) + 2  # per-kind counts; the last: kinds this version lacks
_NONE = np.iinfo(np.int64).max


@dataclass
class Found:
    """What the first pass found (``PlanSweep``'s result)."""

    rows: TrackRows
    lanes: dict[int, int]  # per track
    first: list[int]  # per track: its first start (absolute)
    last: list[int]  # per track: its last end (absolute)
    slices: list[int]  # per track
    kinds: np.ndarray  # (process, KINDS): records in the window by kind
    spans: np.ndarray  # (process, 2): first start, last end in the window (_NONE: none)
    memory: set[tuple[int, int]]  # (task, device) with MEMORY records
    first_start: int  # of every record kept (_NONE: none)
    flows: CallFlows  # per call, the GPU records linked to it


def has_host(cat: Catalog) -> bool:
    """Whether any process has API calls or host ranges (what flows and ops come from)."""
    return any(cat.tables_of(p, HOST_TABLES[:2]) for p in range(len(cat.processes)))


@dataclass(frozen=True, eq=False)
class PlanSweep:
    """The first pass as a sweep of the read engine (compared by identity)."""

    cat: Catalog
    tasks: tuple[Task, ...]
    tables: frozenset[str] = frozenset(RECORD_TABLES)
    columns: frozenset[str] = frozenset(PLACING) | LAUNCH_COLUMNS

    def start(self, read: Read) -> PlanState:
        rows = TrackRows(self.cat, list(self.tasks))
        return PlanState(rows, len(self.cat.processes), Settle(read, has_host(self.cat)))


class PlanState:
    def __init__(self, rows: TrackRows, processes: int, settle: Settle) -> None:
        self.rows = rows
        self.settle = settle
        self.flows = CallFlows()
        self.lanes = CarriedLanes()
        self.first: list[int] = []
        self.last: list[int] = []
        self.slices: list[int] = []
        self.kinds = np.zeros((max(processes, 1), KINDS), dtype=np.int64)
        self.spans = np.full((max(processes, 1), 2), _NONE, dtype=np.int64)
        self.spans[:, 1] = np.iinfo(np.int64).min
        self.memory: set[tuple[int, int]] = set()
        self.first_start = _NONE

    def feed(self, chunk: Chunk) -> None:
        settled = self.settle.feed(chunk)
        if settled is None:
            return
        cols, found = settled
        self.flows.add(found)
        start = cols["start_ns"]
        end = start + cols["duration_ns"]
        kind, process = cols["kind"], cols["process"]
        self.first_start = min(self.first_start, int(start[0]))
        self._count(kind, process, start, end)
        memory = np.flatnonzero(kind == RecordKind.MEMORY)
        if memory.shape[0]:
            task = self.rows.task_of[process[memory]]
            pairs = np.unique((task << 16) | cols["device"][memory]).tolist()
            self.memory.update((p >> 16, p & 0xFFFF) for p in pairs)
        for track, idx in self.rows.split(cols):
            s, e = start[idx], end[idx]
            self.lanes.assign(track, s, e)
            while len(self.slices) <= track:
                self.first.append(int(s[0]))
                self.last.append(int(e.max()))
                self.slices.append(0)
            self.slices[track] += int(idx.shape[0])
            self.last[track] = max(self.last[track], int(e.max()))

    def _count(self, kind: np.ndarray, process: np.ndarray, start: np.ndarray,
               end: np.ndarray) -> None:  # fmt: skip
        code = process.astype(np.int64) * KINDS + np.clip(kind, 0, KINDS - 1)
        counts = np.bincount(code, minlength=self.kinds.size)
        self.kinds += counts.reshape(self.kinds.shape)
        for p in np.unique(process).tolist():
            mine = process == p
            span = self.spans[p]
            span[0] = min(int(span[0]), int(start[np.argmax(mine)]))
            span[1] = max(int(span[1]), int(end[mine].max()))

    def finish(self) -> Found:
        return Found(self.rows, self.lanes.lanes, self.first, self.last, self.slices,
                     self.kinds, self.spans, self.memory, self.first_start,
                     self.flows)  # fmt: skip


@dataclass
class TimelinePlan:
    """The first pass's findings and where every track and counter goes."""

    cat: Catalog
    tasks: list[Task]
    found: Found
    origin_ns: int
    sampled: list[bool]  # per task: has host samples in the window
    layout: TimelineLayout = field(init=False)
    place_of: dict[int, int] = field(default_factory=dict)  # track -> layout index
    host_counters: dict[int, int] = field(default_factory=dict)  # task -> first index
    memory_counters: dict[tuple[int, int], int] = field(default_factory=dict)
    # task -> (layout index of its ``untraced`` track, the spans' starts and ends)
    untraced: dict[int, tuple[int, np.ndarray, np.ndarray]] = field(default_factory=dict)

    def place(self, group_by: GroupBy) -> None:
        """Place every track and counter, task by task, in the timeline's order."""
        layout = Layout(group_by)
        tracks: list[TrackPlace] = []
        counters: list[CounterPlace] = []
        by_task: dict[int, list[int]] = {}
        rows = self.found.rows
        for track, owner in enumerate(rows.task):
            by_task.setdefault(owner, []).append(track)
        for t, task in enumerate(self.tasks):
            mine = by_task.get(t, [])
            keys = {k: rows.keys[k] for k in mine}
            gpu = sorted((k for k in mine if not keys[k].is_host), key=lambda k: _order(keys[k]))
            host = sorted((k for k in mine if keys[k].is_host), key=lambda k: keys[k].thread)
            for k in gpu:
                self.place_of[k] = len(tracks)
                tracks.append(self._placed(layout, t, k))
            host_name = task.cpu.format()
            if self.sampled[t]:
                pid, tid = layout.place_host(host_name)
                self.host_counters[t] = len(counters)
                counters += [CounterPlace(pid, tid, series) for series in HOST_SERIES]
            for device in sorted(d for u, d in self.found.memory if u == t):
                pid, tid = layout.place_host(host_name)
                self.memory_counters[(t, device)] = len(counters)
                counters.append(CounterPlace(pid, tid, memory_counter(device)))
            for k in host:
                self.place_of[k] = len(tracks)
                tracks.append(self._placed(layout, t, k))
            spans = untraced_spans([self.cat.streams[p] for p in task.processes], self.cat.window)
            if spans is not None:
                self.untraced[t] = (len(tracks), *spans)
                tracks.append(self._untraced(layout, task, *spans))
        self.layout = TimelineLayout(tuple(layout.processes()), tuple(tracks), tuple(counters))

    def _placed(self, layout: Layout, t: int, k: int) -> TrackPlace:
        key = self.found.rows.keys[k]
        lanes = self.found.lanes[k]
        task = self.tasks[t]
        if key.is_host:
            pid, tids, names = layout.place_thread(task.cpu.format(), key.thread, lanes)
        else:
            stream = self.cat.streams[task.processes[0]]
            meta = stream.devices.get(key.gpu)
            pid, tids, names = layout.place_slices(
                key.format(), lanes, stream.device_uuid(key.gpu), meta.name if meta else ""
            )
        origin = self.origin_ns
        return TrackPlace(pid, key, tids, names, self.found.first[k] - origin,
                          self.found.last[k] - origin, self.found.slices[k])  # fmt: skip

    def _untraced(self, layout: Layout, task: Task, start: np.ndarray, end: np.ndarray
                  ) -> TrackPlace:  # fmt: skip
        pid, tids, _ = layout.place_thread(task.cpu.format(), 0, 1)
        key = TrackKey.for_thread(task.job_label, task.label, 0)
        origin = self.origin_ns
        return TrackPlace(pid, key, tids, (UNTRACED_THREAD,), int(start[0]) - origin,
                          int(end.max()) - origin, int(start.shape[0]))  # fmt: skip


def _order(key: TrackKey) -> tuple[int, bool, int]:
    return (key.gpu, key.kind is TrackKind.MEMCPY, key.stream)


def host_samples_of(cat: Catalog, task: Task) -> dict[str, np.ndarray]:
    """The task's host samples inside the window, in time order (a sample a second)."""
    pieces = [cat.host_samples(p) for p in task.processes]
    merged = {c: np.concatenate([p[c] for p in pieces]) for c in HOST_COLUMNS}
    order = np.argsort(merged["time_ns"], kind="stable")
    inside = cat.window.holds(merged["time_ns"][order])
    return {c: v[order][inside] for c, v in merged.items()}


def plan(cat: Catalog, found: Found, tasks: Sequence[Task], group_by: GroupBy) -> TimelinePlan:
    """Where everything goes, from the first pass's findings."""
    sampled, firsts = [], [found.first_start]
    for task in tasks:
        times = host_samples_of(cat, task)["time_ns"]
        sampled.append(bool(times.shape[0]))
        if times.shape[0]:
            firsts.append(int(times[0]))
    first = min(firsts)
    result = TimelinePlan(cat, list(tasks), found, 0 if first == _NONE else first, sampled)
    result.place(group_by)
    return result
