"""One read of the lake for any number of needs (views, rules, exports): every query in
one DuckDB connection, then one time-ordered pass feeding every sweep, then each need's
``build``.

What the read finds out on the way is ``Read``'s: the window (``--since``/``--until``,
else the first start and the last end of the GPU records; the host samples' span when
there are none), which (process, CUDA ordinal) pairs have GPU records in it, and so
which GPUs are listed and in what order (a job's streams grouped by task, ordinals
ascending: the timeline's order). Until the GPUs are numbered, a sweep keys GPUs by
UUID (``Read.gpu_keys``); ``Read.listed_gpu`` maps those keys to the listed GPUs once
the sweep is over.

Chunks come per *component*: the processes that share a GPU (by UUID, or by host for
devices without one) are swept together in start order, components one after another,
so a state keyed by anything inside a component (a GPU, a stream, a process, a job on
a GPU) sees its rows in time order; memory holds what overlaps in time in one component.
A sweep that needs every process in one time order (``whole_read``: a job's host calls
against its gaps on every GPU) is fed by a second pass of its own.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import numpy as np

from tfprof.collector.lake.damaged import DamagedFile, damaged_file, probe, report
from tfprof.collector.lake.lake_stream import GPU_TABLES
from tfprof.collector.read import clipped_sql, process_groups, staged_sql
from tfprof.collector.read.lake_catalog import Catalog
from tfprof.collector.read.needs import Got, Need, Query, Sweep, SweepState
from tfprof.collector.read.refs import GpuRef, JobRef, ProcessRef
from tfprof.collector.read.shared_gpus import GpuKeys, components
from tfprof.collector.read.staged_sql import StagedRunner
from tfprof.collector.read.time_chunks import ALWAYS, UNKNOWN, Damage, Run, chunks, plan_runs
from tfprof.collector.timeline.captured_time import Captured, captured_of
from tfprof.collector.timeline.prepare import NameTable

log = logging.getLogger("tfprof.collector.read")
T = TypeVar("T")
GPU_KINDS_ALL = tuple(clipped_sql.KIND[t] for t in GPU_TABLES)
# Per (job, process, device, kind) of the GPU records in the window: count, time, bytes,
# first start, last end. The read runs it when no sweep reads every GPU record (the
# sweep finds the spans on the way otherwise); a need may declare it for its figures.
SPANS = Query(
    "SELECT job, process, device, kind, count(*), sum(d), sum(bytes), min(s), max(e) "
    "FROM {g} GROUP BY ALL"
)


@dataclass
class Read:
    """What a read covers and finds: the catalog's jobs and processes, the window, the
    GPUs listed (``gpus``, numbered once the records are read), the names interned."""

    cat: Catalog
    start_ns: int = 0  # the window; ``start_ns`` is known before the first chunk
    end_ns: int = 0
    names: NameTable = field(default_factory=lambda: NameTable([""]))
    gpus: list[GpuRef] = field(default_factory=list)
    gpu_of: dict[tuple[int, int], int] = field(default_factory=dict)  # (process, ordinal)
    with_records: set[int] = field(default_factory=set)  # jobs with a GPU record
    pairs: list[tuple[int, int, int]] = field(default_factory=list)  # job, process, device
    damage: list[DamagedFile] = field(default_factory=list)  # files left out
    # The window's end and the GPUs are known (``found``): before the sweep when no sweep
    # reads every GPU table, else once it is over.
    ends_known: bool = False
    query_rows: dict[Query, list[tuple[Any, ...]]] = field(default_factory=dict)
    gpu_keys: GpuKeys = field(init=False)

    def found_damage(self, found: Damage) -> None:
        """A file the sweep could not read: said once, left out."""
        lake = next(lake for lake, p in found.rows.files if p == found.path)
        what = damaged_file(lake, found.path, found.reason)
        report(what)
        if all(d.path != what.path for d in self.damage):
            self.damage.append(what)

    def __post_init__(self) -> None:
        self.gpu_keys = GpuKeys(self.cat)
        self.components = components(self.cat)
        self._component_of = {p: c for c, ps in enumerate(self.components) for p in ps}
        self._captured: dict[frozenset[int], Captured | None] = {}

    def captured(self, processes: Iterable[int]) -> Captured | None:
        """The windows the processes were traced in (None: one was traced throughout):
        the same object for the same processes, so sweeps can group keys by it."""
        key = frozenset(processes)
        if key not in self._captured:
            streams = [s for p in sorted(key) for s in self.cat.groups[p]]
            self._captured[key] = captured_of(streams)
        return self._captured[key]

    def gpu_captured(self, key: int) -> Captured | None:
        """The windows of the processes sharing the GPU of ``gpu_keys`` key ``key``."""
        process = self.gpu_keys.process_of[key]
        return self.captured(self.components[self._component_of[process]])

    def captured_ns(self, captured: Captured | None) -> int:
        """The window's captured time: all of it, or its part inside ``captured``."""
        if captured is None:
            return self.window_ns
        return captured.total(self.start_ns, self.end_ns)

    @property
    def jobs(self) -> tuple[JobRef, ...]:
        return self.cat.jobs

    @property
    def processes(self) -> tuple[ProcessRef, ...]:
        return self.cat.processes

    @property
    def window_ns(self) -> int:
        return max(0, self.end_ns - self.start_ns)

    def rows(self, query: Query) -> list[tuple[Any, ...]]:
        """A query's rows, for a sweep's ``start``: the queries of every need and every
        sweep (a sweep's optional ``queries`` attribute) run before the first chunk."""
        return self.query_rows[query]

    def listed_gpu(self) -> np.ndarray:
        """Per GPU key (``gpu_keys``), the index of its GPU in ``gpus``; -1: not listed
        (no GPU record in the window)."""
        index = np.full(max(len(self.gpu_keys.uuids), 1), -1, dtype=np.int64)
        for (process, ordinal), gpu in self.gpu_of.items():
            index[self.gpu_keys.key(process, ordinal)] = gpu
        return index

    def found(self, spans: Iterable[tuple[int, int, int, int, int]]) -> None:
        """The window's end and the GPUs, from each (job, process, device)'s first start
        and last end in the window."""
        by_process: dict[int, list[int]] = {}
        firsts, lasts = [], []
        for job, process, device, first, last in spans:
            by_process.setdefault(process, []).append(device)
            self.pairs.append((job, process, device))
            self.with_records.add(job)
            firsts.append(first)
            lasts.append(last)
        index: dict[str, int] = {}
        for p in self.cat.load_order:  # GPUs numbered in the order the timeline meets them
            stream = self.cat.streams[p]
            for device in sorted(by_process.get(p, ())):
                uuid = stream.device_uuid(device)
                if uuid not in index:
                    meta = stream.devices.get(device)
                    index[uuid] = len(self.gpus)
                    self.gpus.append(
                        GpuRef(uuid, meta.name if meta else "", meta.memory_bytes if meta else 0)
                    )
                self.gpu_of[(p, device)] = index[uuid]
        w = self.cat.window
        if firsts:
            first, last = min(firsts), max(lasts)
        else:  # no GPU record: the host samples still span the run
            sampled = [j.host for j in self.cat.jobs if j.host.samples]
            first = min((h.start_ns for h in sampled), default=0)
            last = max((h.end_ns for h in sampled), default=first)
        self.start_ns = w.lo if w.lo is not None else first
        self.end_ns = w.hi if w.hi is not None else max(last, self.start_ns)
        self.ends_known = True


def read(
    cat: Catalog, needs: Sequence[Need[T]], *, threads: int | None = None
) -> tuple[Read, list[T]]:
    """What the read found, and each need's result, from one read of the catalog. A
    file that cannot be read is said once and left out (``Read.damage``); the rest of
    the read goes on."""
    sweeps: list[Sweep[Any]] = list(dict.fromkeys(s for n in needs for s in n.sweeps()))
    asked = [q for n in needs for q in n.queries()]
    asked += [q for s in sweeps for q in getattr(s, "queries", ())]
    queries = list(dict.fromkeys(asked))
    tables = sorted({t for s in sweeps for t in s.tables})
    sweeps_gpu = set(GPU_TABLES) <= set(tables)
    if not sweeps_gpu and SPANS not in queries:
        queries.append(SPANS)
    damage: list[DamagedFile] = []
    rows, cat = _run_queries(cat, queries, threads, damage)
    state = Read(cat)
    state.damage += damage
    runs = plan_runs(cat, tables, state.found_damage)
    state.start_ns = _window_start(cat, runs, sweeps_gpu)
    state.query_rows = rows
    if not sweeps_gpu:
        spans: dict[tuple[int, int, int], tuple[int, int]] = {}
        for j, p, d, _, _, _, _, first, last in rows[SPANS]:
            f0, l0 = spans.get((j, p, d), (first, last))
            spans[(j, p, d)] = (min(f0, first), max(l0, last))
        state.found((j, p, d, f, e) for (j, p, d), (f, e) in spans.items())
    swept = _sweep(state, runs, sweeps, find_spans=sweeps_gpu) if sweeps else {}
    got = Got(state, rows, swept)
    return state, [n.build(got) for n in needs]


def _window_start(cat: Catalog, runs: Sequence[Run], sweeps_gpu: bool) -> int:
    """The window's start before any record is read: ``--since``, else the least first
    start of the GPU tables' runs (their footers say it); 0 until found otherwise."""
    if cat.window.lo is not None:
        return cat.window.lo
    firsts = [r.first for r in runs if r.kind in GPU_KINDS_ALL]
    if sweeps_gpu and firsts and UNKNOWN not in firsts:
        return min(firsts)
    return 0


def _run_queries(
    cat: Catalog, queries: Sequence[Query], threads: int | None, damage: list[DamagedFile]
) -> tuple[dict[Query, list[tuple[Any, ...]]], Catalog]:
    """Each query's rows, and the catalog they were read from: when DuckDB cannot read
    a file, every file is probed, the unreadable ones are said and left out, and the
    queries run again without them."""
    import duckdb

    try:
        return _queries(cat, queries, threads), cat
    except duckdb.Error:
        found = _probe(cat)
        if not found:
            raise
    for what in found:
        report(what)
    damage += found
    bad = {d.path for d in found}
    cat = replace(
        cat,
        rows=tuple(
            {t: replace(r, files=tuple(f for f in r.files if f[1] not in bad))
             for t, r in process.items()}
            for process in cat.rows
        ),
    )  # fmt: skip
    return _queries(cat, queries, threads), cat


def _probe(cat: Catalog) -> list[DamagedFile]:
    found = []
    for process in cat.rows:
        for rows in process.values():
            for lake, path in rows.files:
                reason = probe(lake, path)
                if reason is not None:
                    found.append(damaged_file(lake, path, reason))
    return found


def _queries(
    cat: Catalog, queries: Sequence[Query], threads: int | None
) -> dict[Query, list[tuple[Any, ...]]]:
    if not queries:
        return {}
    con = clipped_sql.connect(threads)
    try:
        runner = StagedRunner(con)
        whole = [q for q in queries if not q.grouped]
        relations = clipped_sql.Relations(con, cat)
        texts = [clipped_sql.bind(q.sql, relations, cat.window) for q in whole]
        out = {whole[i]: runner.rows(texts[i], then) for i, then in staged_sql.plan(texts)}
        runner.reset()
        relations.close()
        apart = [q for q in queries if q.grouped]
        if apart:
            out.update(process_groups.run(con, runner, cat, apart))
        return out
    finally:
        con.close()  # DuckDB's memory goes back before the sweep: the peaks never add


def _sweep(
    state: Read, runs: Sequence[Run], sweeps: Sequence[Sweep[Any]], find_spans: bool
) -> dict[Any, Any]:
    """Every sweep fed: those keyed inside a component from one pass a component at a
    time, those that need every process in one time order (``whole_read``) from a pass
    of their own, so that the memory of the first (one component's) and of the second
    (every process's open runs) never add. With ``find_spans`` (every GPU record is
    read) the window and the GPUs are found on the way."""
    spans: dict[int, list[int]] = {}  # process << 16 | device -> [first, last]
    whole = [s for s in sweeps if getattr(s, "whole_read", False)]
    apart = [s for s in sweeps if not getattr(s, "whole_read", False)]
    passes = [(apart, state.components), (whole, [tuple(state.cat.load_order)])]
    fed: dict[Any, SweepState[Any]] = {}
    for mine, parts in passes:
        if mine:
            fed |= _pass(state, runs, mine, parts, spans if find_spans else None)
    if find_spans:
        job_of = np.array([p.job for p in state.cat.processes], dtype=np.int64)
        state.found(
            (int(job_of[k >> 16]), k >> 16, k & 0xFFFF, first, last)
            for k, (first, last) in spans.items()
        )
    return {s: fed[s].finish() for s in sweeps}  # once the GPUs are listed


def _pass(
    state: Read,
    runs: Sequence[Run],
    sweeps: Sequence[Sweep[Any]],
    parts: Sequence[tuple[int, ...]],
    spans: dict[int, list[int]] | None,
) -> dict[Any, SweepState[Any]]:
    """``sweeps`` fed from one read of their tables, the processes of each of ``parts``
    together in start order, one part after another."""
    tables = {t for s in sweeps for t in s.tables}
    live: list[tuple[Sweep[Any], SweepState[Any], np.ndarray | None]] = []
    for s in sweeps:
        kinds = (
            None
            if s.tables >= tables
            else np.array([clipped_sql.KIND[t] for t in s.tables], dtype=np.int8)
        )
        live.append((s, s.start(state), kinds))
    columns = sorted({c for s in sweeps for c in s.columns} - set(ALWAYS) | {"device"})
    for part in parts:
        mine = set(part)
        for chunk in chunks(
            [r for r in runs if r.process in mine and r.rows.table in tables],
            state.cat.window,
            columns,
            state.names,
            state.found_damage,
        ):
            if spans is not None:
                _spans(chunk.columns, spans)
            for _, s_state, kinds in live:
                s_state.feed(chunk if kinds is None else chunk.only(kinds.tolist()))
    return {s: s_state for s, s_state, _ in live}


def _spans(c: dict[str, np.ndarray], spans: dict[int, list[int]]) -> None:
    """Each (process, device)'s first start (chunks in start order: the first seen) and
    last end, of GPU records only."""
    gpu = c["kind"] <= GPU_KINDS_ALL[-1]
    if not gpu.any():
        return
    code = (c["process"][gpu].astype(np.int64) << 16) | c["device"][gpu]
    s, e = c["s"][gpu], c["e"][gpu]
    keys, at = np.unique(code, return_index=True)
    for k, a in zip(keys.tolist(), at.tolist(), strict=True):
        last = int(e[code == k].max()) if keys.shape[0] > 1 else int(e.max())
        found = spans.get(k)
        if found is None:
            spans[k] = [int(s[a]), last]
        else:  # a second pass (``_sweep``) may read a table the first did not
            found[0], found[1] = min(found[0], int(s[a])), max(found[1], last)
