"""The records of a read as DuckDB relations, clipped to the window: ``g`` (kernels,
copies, memsets, syncs) and ``h`` (API calls, host ranges, memory records); and the
same unclipped, every record of the run: ``g_all`` and ``h_all``; and how many those
are, from the Parquet footers' row counts, no record read: ``n_all``.

Each relation is every row of its tables of the catalog's processes that overlaps the
window, clipped exactly as the timeline's preparation and the views always clipped:
durations clamped at zero, starts and ends raised to the window's start, ends cut at
its end, a zero-length record kept when its instant lies inside, a clipped copy keeping
the share of its bytes that fits its time (rounded half to even, as ``np.rint``).
Columns: ``kind`` (``RecordKind``), ``process`` and ``job`` (the catalog's indices),
``s``, ``e``, ``d`` (clipped start, end, duration, ns), ``negative`` (the stored
duration was below zero, clamped: the export's metadata counts them) and the record
columns of ``G_COLUMNS`` / ``H_COLUMNS`` (0, or NULL for a string, where a table has
none).

Published files on a local disk are read by DuckDB's own Parquet reader (projection
pushed down, every core); files of a remote lake through pyarrow (its filesystem, no
DuckDB extension); log-tail rows, already in memory, as registered Arrow tables. The
SQL is ours, never a user's: the ``sql`` command has its own locked-down connection.

Every figure leaves DuckDB as an exact integer (counts, sums as HUGEINT) or as an
element of the data (min, max, the two middle values a median averages): callers divide
and round in Python (``analysis.units``).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from tfprof.collector.lake.arrays import arrow_numbers, arrow_strings
from tfprof.collector.lake.fs import Lake
from tfprof.collector.lake.lake_stream import GPU_TABLES, HOST_TABLES
from tfprof.collector.lake.schema import TABLES
from tfprof.collector.lake.spill_dir import spill_dir
from tfprof.collector.read.lake_catalog import Catalog
from tfprof.core.records import RecordKind

if TYPE_CHECKING:
    import duckdb

    from tfprof.collector.timeline.prepare import TimeWindow

# A kernel's collective args (Kineto's), the lake's expanded columns (null: none).
COLLECTIVE_COLUMNS = ("collective", "coll_in_nelems", "coll_out_nelems", "coll_group_size",
                      "coll_dtype", "coll_pg_name")  # fmt: skip

KIND = {"kernels": 1, "copies": 2, "memsets": 3, "syncs": 4, "api_calls": 5, "markers": 6,
        "memory": 7, "steps": 8}  # fmt: skip
assert all(int(RecordKind[k]) == v for k, v in (("KERNEL", 1), ("MARKER", 6), ("MEMORY", 7)))
# Record columns of each relation (as ``tfprof.core.records`` names them); ``name`` and
# ``domain`` are strings.
G_COLUMNS = ("device", "context", "stream", "correlation", "external_id", "name", "bytes",
             "copy_kind", "src_kind", "dst_kind", "sync_type", *COLLECTIVE_COLUMNS)  # fmt: skip
H_COLUMNS = ("thread", "correlation", "external_id", "name", "cbid", "return_value",
             "category", "domain", "device", "stream", "bytes", "memory_op")  # fmt: skip
# The steps table (the hook's STEP records): ``external_id`` is the step's number.
ST_COLUMNS = ("thread", "external_id", "name")
_STRINGS = frozenset({"name", "domain", "collective", "coll_dtype", "coll_pg_name"})
# ``g``/``h``: in the window, clipped; ``g_all``/``h_all``: every record of the run
# (durations clamped), what whole-run figures (records stored) count; ``p``: one row per
# process (``process``, ``job``, ``link``: its link group, ``Catalog.link_groups``);
# ``st``: the steps (STEP records) in the window, clipped; ``n_all``: the rows of
# ``g_all`` and ``h_all`` counted (``process``, ``job``, ``n``: a row per file or part).
RELATIONS = ("g", "h", "g_all", "h_all", "p", "st", "n_all")
# Written in braces too: the window's bounds as integer literals, NULL for an open end.
BOUNDS = ("lo", "hi")


def connect(threads: int | None = None) -> duckdb.DuckDBPyConnection:
    """A connection for the read's own SQL: no extension installed or loaded."""
    import duckdb  # where used: what reads no SQL (the embedded summary) never loads it

    con = duckdb.connect(
        config={"autoinstall_known_extensions": False, "autoload_known_extensions": False}
    )
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    con.execute("SET preserve_insertion_order = false")  # no ORDER BY depends on it
    # Every statement of a read binds the same files (``Relations._present``, then each
    # query's read_parquet, whose union_by_name opens every footer): their footers are
    # parsed once per read, not once per statement. The cache ends with the connection.
    con.execute("SET parquet_metadata_cache = true")
    # The memory limit is the staged runner's (``staged_sql``); past it, sorts, joins,
    # aggregates and the stages' tables spill here.
    con.execute(f"SET temp_directory = '{spill_dir()}'")
    return con


def lake_column(table: str, column: str) -> str | None:
    """The lake column of ``table`` holding record column ``column`` (a marker's domain
    is its ``domain``; an API call's ``category`` its own)."""
    for c in TABLES[table].columns:
        if column == "domain":
            if c.name == "domain":
                return c.name
        elif c.record_column == column and c.name != "domain":
            return c.name
    return None


def bound(value: int | None) -> str:
    """A window bound as SQL: the integer, or NULL for an open end."""
    return "NULL" if value is None else str(int(value))


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def bind(sql: str, relations: Relations, window: TimeWindow) -> str:
    """``sql`` with its relations (``{g}``...) and bounds (``{lo}``, ``{hi}``) written in."""
    for name in RELATIONS:
        if "{" + name + "}" in sql:
            sql = sql.replace("{" + name + "}", f"({relations.text(name)})")
    for name, value in zip(BOUNDS, (window.lo, window.hi), strict=True):
        sql = sql.replace("{" + name + "}", bound(value))
    return sql


# Names of what Relations register, unique in the process: a read registers a set for
# every group of processes it runs apart (``process_groups``) on one connection.
_SCANS = itertools.count(1)


class Relations:
    """Registers what a read's SQL scans on ``con`` and writes its relations' text: of
    every process of the catalog, or of ``only`` those."""

    def __init__(
        self, con: duckdb.DuckDBPyConnection, cat: Catalog, only: Sequence[int] | None = None
    ) -> None:
        self.con, self.cat = con, cat
        self.only = range(len(cat.processes)) if only is None else only
        self._registered: list[str] = []
        self._text: dict[str, str] = {}
        self._columns: dict[str, frozenset[str]] = {}  # by a scan's file list

    def close(self) -> None:
        """Unregisters what these relations registered (owner lists, log-tail rows)."""
        for name in self._registered:
            self.con.unregister(name)
        self._registered.clear()

    def text(self, name: str) -> str:
        """SQL text (a subquery) of a relation of ``RELATIONS``."""
        if name == "p" and name not in self._text:
            cat = self.cat
            # Built from buffers: pa.array would import pandas (lake/arrays.py).
            ids = {
                "process": np.arange(len(cat.processes), dtype=np.int64),
                "job": np.array([p.job for p in cat.processes], dtype=np.int64),
                "link": np.array(cat.link_groups, dtype=np.int64),
            }
            table = pa.table({k: arrow_numbers(v, pa.int64()) for k, v in ids.items()})
            self._text[name] = f"SELECT * FROM {self._register(table)}"
        if name == "n_all" and name not in self._text:
            self._text[name] = self._counts((*GPU_TABLES, *HOST_TABLES))
        if name not in self._text:
            gpu = name.startswith("g")
            tables: Sequence[str] = GPU_TABLES if gpu else HOST_TABLES
            columns: Sequence[str] = G_COLUMNS if gpu else H_COLUMNS
            if name == "st":
                tables, columns = ("steps",), ST_COLUMNS
            self._text[name] = self._relation(tables, columns, clip=not name.endswith("_all"))
        return self._text[name]

    def _register(self, data: pa.Table | object) -> str:
        name = f"tfprof_scan_{next(_SCANS)}"
        self.con.register(name, data)
        self._registered.append(name)
        return name

    def _head(self, table: str, columns: Sequence[str], src: str, process: str, job: str,
              present: frozenset[str] | None = None) -> str:  # fmt: skip
        """The SELECT list of one table's rows as raw columns of the relation. A lake
        column that none of the files has (``present``: the columns they do have; files
        written before the column existed) reads as NULL, as a row without a value."""
        cols = []
        for c in columns:
            lake = lake_column(table, c)
            if lake is not None and (present is None or lake in present):
                cols.append(f"{src}{lake} AS {c}")
            elif lake is not None:
                cols.append(f"NULL::{'VARCHAR' if c in _STRINGS else 'BIGINT'} AS {c}")
            else:
                cols.append(f"NULL::VARCHAR AS {c}" if c in _STRINGS else f"0 AS {c}")
        return (
            f"SELECT {KIND[table]} AS kind, {process} AS process, {job} AS job, "
            f"{src}start_ns AS s0, greatest({src}duration_ns, 0) AS d0, "
            f"{src}duration_ns < 0 AS negative, {', '.join(cols)}"
        )

    def _local(self, table: str, files: Sequence[tuple[str, int, int]],
               columns: Sequence[str]) -> str:  # fmt: skip
        """One scan of a table's local files, every process's: each row's process and job
        from its file (a file holds one stream's rows, a stream is one process's).

        One ``read_parquet`` per table, not one per process: DuckDB sinks each scan of a
        UNION ALL separately, and 64 ranks' scans feeding one aggregate held 64 partial
        hash tables that could not spill (Out of Memory at 512MB, bench/dist_scale.py)."""
        owners = self._owners(files)
        paths = ", ".join(_literal(f) for f, _, _ in files)
        present = self._present(table, [f for f, _, _ in files], paths)
        return (
            f"{self._head(table, columns, 'r.', 'o.tfp_process', 'o.tfp_job', present)} FROM "
            f"read_parquet([{paths}], union_by_name = true, filename = 'tfp_file') r "
            f"JOIN {owners} o ON r.tfp_file = o.tfp_file"
        )

    def _owners(self, files: Sequence[tuple[str, int, int]]) -> str:
        """Registers each file's process and job (``tfp_file``, ``tfp_process``,
        ``tfp_job``): a file holds one stream's rows, a stream is one process's."""
        owner = {
            "tfp_file": arrow_strings([f for f, _, _ in files]),
            "tfp_process": arrow_numbers(np.array([p for _, p, _ in files], np.int64), pa.int64()),
            "tfp_job": arrow_numbers(np.array([j for _, _, j in files], np.int64), pa.int64()),
        }
        return self._register(pa.table(owner))

    def _counts(self, tables: Sequence[str]) -> str:
        """``n_all``: how many rows ``tables`` hold, as ``g_all``/``h_all`` would list
        them: a local file's from its footer (``parquet_file_metadata``), a log tail's
        from memory, a remote lake's counted through pyarrow."""
        selects = []
        local: list[tuple[str, int, int]] = []
        for p in self.only:
            job = self.cat.processes[p].job
            for rows in self.cat.tables_of(p, tables):
                local.extend((path, p, job) for lake, path in rows.files if lake.local)
                remote = [(lake, path) for lake, path in rows.files if not lake.local]
                if remote:
                    selects.append(f"SELECT {p} AS process, {job} AS job, count(*) AS n "
                                   f"FROM {self._remote(rows.table, remote)}")  # fmt: skip
                if rows.tails:
                    n = sum(t.num_rows for t in rows.tails)
                    selects.append(f"SELECT {p} AS process, {job} AS job, {n} AS n")
        if local:
            paths = ", ".join(_literal(f) for f, _, _ in local)
            selects.append(
                "SELECT o.tfp_process AS process, o.tfp_job AS job, m.num_rows AS n "
                f"FROM parquet_file_metadata([{paths}]) m "
                f"JOIN {self._owners(local)} o ON m.file_name = o.tfp_file"
            )
        if not selects:
            return "SELECT 0 AS process, 0 AS job, 0 AS n WHERE false"
        return " UNION ALL ".join(selects)

    def _present(self, table: str, files: Sequence[str], paths: str) -> frozenset[str]:
        """The columns any of ``files`` (``paths``: as SQL literals) has, from their
        footers. ``union_by_name`` gives a column missing from some files NULLs, but a
        column missing from all of them (a lake written before it existed) fails to bind.
        Newest file first, until every column of the table is found: one footer for a
        lake written since the newest column, every footer only for an older one (a
        query per footer: one per table on a current lake)."""
        if paths not in self._columns:
            schema = {c.name for c in TABLES[table].columns}
            found: set[str] = set()
            for path in reversed(files):
                one = self.con.sql(f"SELECT DISTINCT name FROM parquet_schema({_literal(path)})")
                found |= {str(name) for (name,) in one.fetchall()}
                if schema <= found:
                    break
            self._columns[paths] = frozenset(found)
        return self._columns[paths]

    def _remote(self, table: str, files: Sequence[tuple[Lake, str]]) -> str:
        import pyarrow.dataset as ds

        schema = TABLES[table].schema
        by_lake: dict[int, tuple[Lake, list[str]]] = {}
        for lake, path in files:
            by_lake.setdefault(id(lake), (lake, []))[1].append(path)
        parts = [
            ds.dataset(paths, schema=schema, format="parquet", filesystem=lake.fs)
            for lake, paths in by_lake.values()
        ]
        return self._register(parts[0] if len(parts) == 1 else ds.dataset(parts))

    def _relation(self, tables: Sequence[str], columns: Sequence[str], clip: bool) -> str:
        selects = []
        local: dict[str, list[tuple[str, int, int]]] = {}
        for p in self.only:
            ref = self.cat.processes[p]
            for rows in self.cat.tables_of(p, tables):
                local.setdefault(rows.table, []).extend(
                    (path, p, ref.job) for lake, path in rows.files if lake.local
                )
                remote = [(lake, path) for lake, path in rows.files if not lake.local]
                head = self._head(rows.table, columns, "", str(p), str(ref.job))
                if remote:
                    selects.append(f"{head} FROM {self._remote(rows.table, remote)}")
                if rows.tails:
                    selects.append(f"{head} FROM {self._register(pa.concat_tables(rows.tails))}")
        selects += [self._local(t, files, columns) for t, files in local.items() if files]
        if not selects:
            empty = ", ".join(
                f"NULL::VARCHAR AS {c}" if c in _STRINGS else f"0 AS {c}" for c in columns
            )
            return (
                "SELECT 0 AS kind, 0 AS process, 0 AS job, 0 AS s, 0 AS e, 0 AS d, "
                f"false AS negative, {empty} WHERE false"
            )
        raw = " UNION ALL ".join(selects)
        lo, hi = (self.cat.window.lo, self.cat.window.hi) if clip else (None, None)
        keep = []
        if hi is not None:
            keep.append(f"s0 < {hi}")
        if lo is not None:
            keep.append(f"(s0 + d0 > {lo} OR s0 >= {lo})")
        where = f"WHERE {' AND '.join(keep)}" if keep else ""
        s = f"greatest(s0, {lo})" if lo is not None else "s0"
        e = "s0 + d0" if lo is None else f"greatest(s0 + d0, {lo})"
        e = e if hi is None else f"least({e}, {hi})"
        rest = [c for c in columns if c != "bytes"]
        share = "bytes"
        if "bytes" in columns and (lo is not None or hi is not None):
            # A copy cut by the window keeps the share of its bytes that fits its time,
            # bytes x (kept / whole) in that order, as the chunks compute it.
            share = (
                f"CASE WHEN kind = 2 AND ({e}) - ({s}) < d0 THEN CAST(round_even("
                f"bytes::DOUBLE * ((({e}) - ({s}))::DOUBLE / greatest(d0, 1)::DOUBLE), 0) "
                "AS BIGINT) ELSE bytes END"
            )
        extra = ", ".join([*rest, *([f"{share} AS bytes"] if "bytes" in columns else [])])
        return (
            f"SELECT kind, process, job, {s} AS s, {e} AS e, ({e}) - ({s}) AS d, negative, "
            f"{extra} FROM ({raw}) {where}"
        )
