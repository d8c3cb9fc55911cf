"""A set of processes' records in start order, a chunk at a time, memory bounded by what
overlaps in time (never by a process's records).

Each row group of each Parquet file, and each log tail, is a *run* whose first start is
known before it is read (the footer's statistics; a tail is in memory). Runs are opened
in the order of those firsts and read a batch at a time; each open run knows the least
start its unread rows can have. Below the least of those bounds and of the firsts of the
runs not opened yet, every row has been read: those rows go out merged in start order,
in chunks of at most ``CHUNK_ROWS``, each with a ``bound`` no later row starts before.

A row group written sorted by start (the footer's ``sorting_columns`` says so, as
compaction writes them) streams a batch at a time: ``BATCH_ROWS``, fewer when many runs
are open at once (64 ranks' tables side by side), so that what the open runs hold read
and not yet sent stays near ``HELD_ROWS`` whatever the number of processes. One written
in arrival order (CUPTI's completion order, nearly sorted: lakes compacted before
sorting) is read whole and sorted, so memory then holds the row groups that overlap in
time.

Rows are clipped to the window exactly as the SQL relations (``clipped_sql``) clip
them; ``s`` and ``e`` are the clipped start and end, and chunks are in clipped-start
order (the same order as unclipped: raising starts to the window's start keeps it).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tfprof.collector.lake.arrays import numbers
from tfprof.collector.lake.damaged import READ_ERRORS, open_verified, reason_of
from tfprof.collector.read.clipped_sql import KIND, lake_column
from tfprof.collector.read.lake_catalog import Catalog, TableRows
from tfprof.collector.timeline.prepare import NameTable, TimeWindow
from tfprof.collector.timeline.slice_names import slice_name_ids

NEVER = int(np.iinfo(np.int64).max)
UNKNOWN = int(np.iinfo(np.int64).min)  # a run whose first start no footer says
CHUNK_ROWS = 1 << 16  # rows a consumer sees at once (bounds what it makes per row)
BATCH_ROWS = 1 << 14  # rows read at once from a sorted row group
# Rows all open runs may hold decoded between them (Arrow's batch and its columns):
# each run opened reads batches of HELD_ROWS / (runs open), within these bounds.
HELD_ROWS = 1 << 19
MIN_BATCH_ROWS = 1 << 10
Columns = dict[str, np.ndarray]
# Columns every chunk has; ``start_ns`` and ``duration_ns`` (unclipped start, whole
# clamped duration) only when asked for. ``name``: the record's own name as an id into
# the read's ``NameTable`` (0: none); ``slice_name``: its timeline name
# (``slice_names``); ``domain``: a host range's NVTX domain or framework category
# (``cpu_op``, ``tf_op``), an id into the same table (0: none); all interned as they come.
# ``whole_bytes``: a record's bytes as stored, never cut by the window (``bytes`` keeps
# a clipped copy's share; the timeline shows records whole).
ALWAYS = ("kind", "process", "s", "e")
NAME_COLUMNS = frozenset({"name", "slice_name", "domain"})
_TIMES = frozenset({"start_ns", "duration_ns"})


@dataclass
class Chunk:
    """Rows in start order; every later chunk's rows start at ``bound`` or later."""

    columns: Columns
    bound: int

    def __len__(self) -> int:
        return int(self.columns["s"].shape[0])

    def __getitem__(self, column: str) -> np.ndarray:
        return self.columns[column]

    def only(self, kinds: Sequence[int]) -> Chunk:
        """The rows of ``kinds`` (``RecordKind``), same bound."""
        keep = np.isin(self.columns["kind"], np.asarray(kinds, dtype=np.int8))
        if keep.all():
            return self
        return Chunk({c: v[keep] for c, v in self.columns.items()}, self.bound)


@dataclass(frozen=True)
class Run:
    """A row group of a file, or a log tail: rows of one table of one process."""

    first: int  # the least start it holds (footer statistics); UNKNOWN: not said
    kind: int
    process: int
    rows: TableRows
    path: str = ""  # with ``lake``: a file and one of its row groups
    row_group: int = 0
    tail: pa.Table | None = None
    ordered: bool = False  # rows sorted by start: read a batch at a time


@dataclass
class Damage:
    """A file the read could not use, and why (the engine reports it once)."""

    path: str
    rows: TableRows  # the process's rows of the table the file is of
    reason: str


def open_parquet(rows: TableRows, path: str, streamed: bool = False) -> pq.ParquetFile:
    """One of ``rows``' files, its pages' checksums verified as they are read."""
    return open_verified(next(lake for lake, p in rows.files if p == path), path, streamed)


def plan_runs(cat: Catalog, tables: Sequence[str], damaged: Callable[[Damage], None]) -> list[Run]:
    """Every run of ``tables`` of every process, in the order of their first starts;
    a file whose footer cannot be read is left out and reported to ``damaged``."""
    runs = []
    for p in range(len(cat.processes)):
        for rows in cat.tables_of(p, tables):
            kind = KIND[rows.table]
            for _, path in rows.files:
                try:
                    meta = open_parquet(rows, path).metadata
                except READ_ERRORS as exc:
                    damaged(Damage(path, rows, reason_of(exc)))
                    continue
                at = meta.schema.to_arrow_schema().get_field_index("start_ns")
                for i in range(meta.num_row_groups):
                    group = meta.row_group(i)
                    stats = group.column(at).statistics
                    ok = stats is not None and stats.has_min_max
                    ordered = any(
                        c.column_index == at and not c.descending
                        for c in (group.sorting_columns or ())[:1]
                    )
                    first = int(stats.min) if ok else UNKNOWN
                    runs.append(Run(first, kind, p, rows, path, i, None, ordered))
            for tail in rows.tails:
                first = int(numbers(tail.column("start_ns")).min())
                runs.append(Run(first, kind, p, rows, tail=tail))
    runs.sort(key=lambda r: r.first)
    return runs


def _lake_names(table: str, columns: Sequence[str]) -> dict[str, str]:
    """Record column -> the table's lake column (a memset's src_kind is memory_kind)."""
    wanted = ["start_ns", "duration_ns", *columns]
    if {"name", "slice_name"} & set(columns):
        wanted += ["name", "copy_kind", "sync_type"]
    found = {c: lake_column(table, c) for c in dict.fromkeys(wanted) if c not in NAME_COLUMNS}
    # The string columns the names are interned from (``_Names``), read as they are.
    if {"name", "slice_name"} & set(columns):
        found["name"] = lake_column(table, "name")
    if "domain" in columns:
        found["domain"] = lake_column(table, "domain")
    if "whole_bytes" in columns:
        found["whole_bytes"] = lake_column(table, "bytes")
    return {c: lake for c, lake in found.items() if lake is not None}


class _Names:
    """A run's names interned into the read's ``NameTable``: the mapping of a batch's
    dictionary is kept while the next batch's dictionary is the same (a row group's)."""

    def __init__(self, names: NameTable, column: str = "name") -> None:
        self.names = names
        self.column = column
        self._dictionary: pa.Array | None = None
        self._strings: list[str] = [""]
        self._to_local: np.ndarray = np.zeros(1, np.int64)

    def local(self, table: pa.Table) -> tuple[list[str], np.ndarray]:
        """(strings, per row its index into them; 0: no name) of a batch."""
        n = table.num_rows
        if self.column not in table.column_names:
            return [""], np.zeros(n, np.int64)
        parts = []
        for chunk in table.column(self.column).chunks:
            if not isinstance(chunk, pa.DictionaryArray):
                chunk = chunk.dictionary_encode()
            if self._dictionary is None or not chunk.dictionary.equals(self._dictionary):
                values = chunk.dictionary.to_pylist()
                self._dictionary = chunk.dictionary
                self._strings = ["", *(str(v) for v in values)]
                # An empty name is no name (0), as the stream's string table has it.
                self._to_local = np.array(
                    [0, *(i + 1 if v else 0 for i, v in enumerate(values))], np.int64
                )
            parts.append(self._to_local[numbers(chunk.indices, null=-1).astype(np.int64) + 1])
        local = np.concatenate(parts) if len(parts) != 1 else parts[0]
        return self._strings, local


def _convert(table: pa.Table, run: Run, columns: Sequence[str], window: TimeWindow,
             names: _Names | None, domains: _Names | None = None) -> Columns:  # fmt: skip
    """A batch of the run as clipped columns (``raw``: the unclipped start)."""
    lake = _lake_names(run.rows.table, columns)
    n = table.num_rows
    held = set(table.column_names)

    def column(c: str) -> np.ndarray:
        if c in lake and lake[c] in held:
            return numbers(table.column(lake[c]), null=0).astype(np.int64, copy=False)
        return np.zeros(n, dtype=np.int64)

    start = column("start_ns")
    duration = np.maximum(column("duration_ns"), 0)
    out = {c: column(c) for c in columns if c not in NAME_COLUMNS | _TIMES}
    if "domain" in columns:
        if domains is None:
            out["domain"] = np.zeros(n, dtype=np.int64)
        else:
            strings, local = domains.local(table)
            out["domain"] = domains.names.intern_column(strings, local, unnamed=0)
    if names is not None and {"name", "slice_name"} & set(columns):
        strings, local = names.local(table)
        if "name" in columns:
            out["name"] = names.names.intern_column(strings, local, unnamed=0)
        if "slice_name" in columns:
            kinds = np.full(n, run.kind, dtype=np.int8)
            out["slice_name"] = slice_name_ids(
                names.names, strings, kinds, local, column("copy_kind"), column("sync_type")
            )
    end = start + duration
    keep = window.overlapping(start, end)
    if keep is not None:
        start, end, duration = start[keep], end[keep], duration[keep]
        out = {c: v[keep] for c, v in out.items()}
    out["raw"] = start  # what the next run's first bounds
    if "start_ns" in columns:
        out["start_ns"] = start
    if "duration_ns" in columns:
        out["duration_ns"] = duration
    s, e = start, end
    if window.lo is not None:
        s, e = np.maximum(s, window.lo), np.maximum(e, window.lo)
    if window.hi is not None:
        e = np.minimum(e, window.hi)
    if "bytes" in out and run.kind == KIND["copies"] and not window.is_open:
        # A copy cut by the window keeps the share of its bytes that fits its time.
        cut = (e - s) < duration
        if cut.any():
            share = np.where(cut, (e - s) / np.maximum(duration, 1), 1.0)
            out["bytes"] = np.rint(out["bytes"] * share).astype(np.int64)
    m = s.shape[0]
    out["s"], out["e"] = s, e
    out["kind"] = np.full(m, run.kind, dtype=np.int8)
    out["process"] = np.full(m, run.process, dtype=np.int32)
    return out


class _Open:
    """An opened run: its rows read and not yet sent (in start order), and the least
    start its unread rows can have (``low``; NEVER once all are read)."""

    def __init__(self, run: Run, columns: Sequence[str], window: TimeWindow,
                 names: NameTable | None, damaged: Callable[[Damage], None],
                 batch_rows: int = BATCH_ROWS) -> None:  # fmt: skip
        self.run, self.columns, self.window = run, columns, window
        self.batch_rows = batch_rows
        self.names = _Names(names) if names is not None else None
        self.domains = _Names(names, "domain") if names is not None else None
        self.damaged = damaged
        self._batches = self._tables()
        self.buffer: list[Columns] = []
        self.low = run.first

    def _tables(self) -> Iterator[pa.Table]:
        run = self.run
        if run.tail is not None:
            yield run.tail
            return
        file = open_parquet(run.rows, run.path, streamed=run.ordered)
        present = set(file.schema_arrow.names)
        wanted = [c for c in _lake_names(run.rows.table, self.columns).values() if c in present]
        if not run.ordered:
            yield file.read_row_group(run.row_group, columns=wanted)
            return
        for batch in file.iter_batches(self.batch_rows, row_groups=[run.row_group], columns=wanted):
            yield pa.Table.from_batches([batch])

    def read(self) -> None:
        try:
            table = next(self._batches, None)
        except READ_ERRORS as exc:
            self.damaged(Damage(self.run.path, self.run.rows, reason_of(exc)))
            table = None
        if table is None:
            self.low = NEVER
            return
        rows = _convert(table, self.run, self.columns, self.window, self.names, self.domains)
        raw = rows["raw"]
        if not self.run.ordered:
            order = np.argsort(raw, kind="stable")  # completion order: nearly sorted
            rows = {c: v[order] for c, v in rows.items()}
            self.low = NEVER  # read whole
        elif raw.shape[0]:
            self.low = max(self.low, int(raw[-1]))
        self.buffer.append(rows)

    def take(self, bound: int) -> list[Columns]:
        """The buffered rows starting before ``bound``; the rest stay."""
        taken, kept = [], []
        for rows in self.buffer:
            cut = int(np.searchsorted(rows["raw"], bound, side="left"))
            if cut:
                taken.append({c: v[:cut] for c, v in rows.items()})
            if cut < rows["raw"].shape[0]:
                kept.append({c: v[cut:] for c, v in rows.items()} if cut else rows)
        self.buffer = kept
        return taken


@dataclass(order=True)
class _Next:
    first: int
    order: int
    run: Run = field(compare=False)


def chunks(
    runs: Sequence[Run],
    window: TimeWindow,
    columns: Sequence[str] = (),
    names: NameTable | None = None,
    damaged: Callable[[Damage], None] = lambda d: None,
    max_rows: int | None = None,
) -> Iterator[Chunk]:
    """The rows of ``runs`` (with ``columns`` beyond ``ALWAYS``) in start order, at most
    ``max_rows`` (default ``CHUNK_ROWS``) at a time."""
    max_rows = max_rows or CHUNK_ROWS
    lo = window.lo if window.lo is not None else UNKNOWN
    waiting = [_Next(r.first, i, r) for i, r in enumerate(runs)]
    heapq.heapify(waiting)
    opened: list[_Open] = []
    ready: list[Columns] = []
    held = 0
    while True:
        least = min(opened, key=lambda r: r.low, default=None)
        first = waiting[0].first if waiting else NEVER
        bound = min(least.low if least is not None else NEVER, first)
        for run in opened:
            for part in run.take(bound):
                ready.append(part)
                held += part["raw"].shape[0]
        if ready and (held >= max_rows or bound == NEVER):
            yield from _send(ready, max(bound, lo), max_rows)
            ready, held = [], 0
        if bound == NEVER:
            return
        if least is not None and least.low <= first:
            least.read()
        else:
            batch = _batch_rows(len(opened) + 1)
            run = _Open(heapq.heappop(waiting).run, columns, window, names, damaged, batch)
            run.read()
            opened.append(run)
        opened = [r for r in opened if r.low != NEVER or r.buffer]


def _batch_rows(open_runs: int) -> int:
    """The batch a run opened now reads: its share of ``HELD_ROWS``."""
    return max(MIN_BATCH_ROWS, min(BATCH_ROWS, HELD_ROWS // open_runs))


def _send(parts: list[Columns], bound: int, max_rows: int) -> Iterator[Chunk]:
    """Sorted parts merged in start order, as chunks of at most ``max_rows``."""
    if len(parts) == 1:
        merged = parts[0]
    else:
        order = np.argsort(np.concatenate([p["raw"] for p in parts]), kind="stable")
        merged = {c: np.concatenate([p[c] for p in parts])[order] for c in parts[0]}
    merged.pop("raw")
    n = merged["s"].shape[0]
    for a in range(0, n, max_rows):
        b = min(a + max_rows, n)
        # In start order: the next slice's first start bounds what follows it.
        yield Chunk({c: v[a:b] for c, v in merged.items()}, int(merged["s"][b]) if b < n else bound)
