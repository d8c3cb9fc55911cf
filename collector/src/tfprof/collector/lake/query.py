"""The SQL engine over one or more lakes: DuckDB, embedded, with every table a view.

Each table is an Arrow dataset DuckDB scans with projection and filter pushdown (a
``job = '...'`` filter reads only that job's partition directories): the published
Parquet files of every lake named, plus, for each collector data dir named, the part of
its streams' logs not compacted yet, read from the logs themselves (tails.py: the two
never overlap).
"""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds

from tfprof.collector.errors import InvalidArgument
from tfprof.collector.lake.arrays import arrow_strings
from tfprof.collector.lake.damaged import DamagedFile, damaged_file, probe, report
from tfprof.collector.lake.fs import Lake
from tfprof.collector.lake.location import Source, distinct_lakes, resolve
from tfprof.collector.lake.schema import PARTITION, TABLES, Table
from tfprof.collector.lake.spill_dir import spill_dir
from tfprof.collector.lake.tails import Tails, published, read_tails
from tfprof.collector.lake.views import LIVE_STREAMS, VIEWS
from tfprof.collector.store.catalog import runs
from tfprof.collector.store.files import is_streaming
from tfprof.collector.store.loader import stream_dirs

# What a query may not do unless ``--allow-external`` is given: read or write files
# (read_csv, COPY, ATTACH, EXPORT), install or load extensions, or change settings. The
# lake stays readable: its tables are registered Arrow datasets (pyarrow reads the
# files), which need no external access.
READ_ONLY = {
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
}


# Parquet read with every page's checksum verified: a flipped byte is an error, not a
# wrong number (lake/damaged.py).
VERIFIED = ds.ParquetFileFormat(
    default_fragment_scan_options=ds.ParquetFragmentScanOptions(page_checksum_verification=True)
)


class Engine:
    """DuckDB over the sources named (data dirs, lake dirs, lake URLs); read-only unless
    ``allow_external``."""

    def __init__(self, arguments: list[str], allow_external: bool = False) -> None:
        self.sources: list[Source] = [resolve(a) for a in arguments]
        self.skipped: list[str] = []
        self.allow_external = allow_external
        # Files found unreadable: left out of every table from then on (lake/damaged.py).
        self.damaged: list[DamagedFile] = []

    def connect(self) -> duckdb.DuckDBPyConnection:
        tails = Tails()
        for source in self.sources:
            if source.data_dir is not None:
                read_tails(source.data_dir, tails)
        self.skipped = tails.skipped
        lakes = distinct_lakes(self.sources)
        con = duckdb.connect(config={} if self.allow_external else dict(READ_ONLY))
        for table in TABLES.values():
            con.register(table.name, self.dataset(table, lakes, tails))
        con.register("live_streams", self.live_streams())
        for name, sql in VIEWS.items():
            con.execute(f"CREATE VIEW {name} AS {sql}")
        if not self.allow_external:
            # Spilling stays possible: its folder is set before access is turned off.
            con.execute(f"SET temp_directory = '{_temp_directory()}'")
            con.execute("SET enable_external_access = false")
            con.execute("SET lock_configuration = true")
        return con

    def live_streams(self) -> pa.Table:
        """(job, run, stream_id) of every stream a live collector holds open in the data
        dirs named (its flock on the stream's log): what makes a run ``streaming``."""
        rows: list[tuple[str, str, str]] = []
        for source in self.sources:
            if source.data_dir is None:
                continue
            for job, run, run_dir in runs(source.data_dir / "jobs"):
                rows += [(job, run, d.name) for d in stream_dirs(run_dir) if is_streaming(d)]
        columns = [arrow_strings([r[i] for r in rows]) for i in range(3)]
        return pa.Table.from_arrays(columns, schema=LIVE_STREAMS)

    def dataset(self, table: Table, lakes: list[Lake], tails: Tails) -> ds.Dataset:
        schema = table.full_schema
        partitioning = ds.partitioning(PARTITION, flavor="hive")
        children = []
        left_out = {d.path for d in self.damaged}
        for lake in lakes:
            files = [f for f in published(lake, table, tails.streams) if f not in left_out]
            if files:
                base = lake.path(table.name)
                children.append(
                    ds.dataset(
                        files,
                        schema=schema,
                        format=VERIFIED,
                        filesystem=lake.fs,
                        partitioning=partitioning,
                        partition_base_dir=base,
                    )
                )
        tail = tails.rows.get(table.name) or [schema.empty_table()]
        children.append(ds.dataset(pa.concat_tables(tail), schema=schema))
        return ds.dataset(children) if len(children) > 1 else children[0]

    def readable_connect(self) -> duckdb.DuckDBPyConnection:
        """A connection on which every table's files open (each footer read once: a
        count per table): when one cannot be read, every file is probed, the unreadable
        ones said and left out, and a fresh connection returned. For callers that run
        their own queries; a page damaged past its footer is found by ``probe`` only."""
        import duckdb

        con = self.connect()
        try:
            for name in TABLES:
                con.execute(f"SELECT count(*) FROM {name}").fetchall()
        except duckdb.Error as exc:
            con.close()
            if not _reading(exc) or not self.probe():
                raise
            return self.connect()
        return con

    def probe(self) -> list[DamagedFile]:
        """Every file of every table read whole (checksums verified): the unreadable ones,
        said once and left out from now on. What a query that failed reading runs."""
        tails = Tails()
        for source in self.sources:
            if source.data_dir is not None:
                read_tails(source.data_dir, tails)
        known = {d.path for d in self.damaged}
        found = []
        for lake in distinct_lakes(self.sources):
            for table in TABLES.values():
                for path in published(lake, table, tails.streams):
                    reason = None if path in known else probe(lake, path)
                    if reason is not None:
                        found.append(damaged_file(lake, path, reason))
                        report(found[-1])
        self.damaged += found
        return found


def _temp_directory() -> str:
    return spill_dir()


class _ReadFailed(Exception):
    """DuckDB could not read one of the lake's files."""


def run_query(engine: Engine, sql: str) -> pa.Table:
    """The query's result; bad SQL is one ``InvalidArgument`` line with DuckDB's reason,
    and what read-only refuses one line naming the setting (exit status 2). When a file
    cannot be read, every file is probed, the unreadable ones are said and left out, and
    the query runs again without them."""
    try:
        return _run(engine, sql, first=True)
    except _ReadFailed:
        engine.probe()
        return _run(engine, sql, first=False)


def _run(engine: Engine, sql: str, first: bool) -> pa.Table:
    con = engine.connect()
    try:
        result = con.sql(sql)
        if result is None:
            return pa.table({})
        return result.to_arrow_table()
    except duckdb.PermissionException as exc:
        raise InvalidArgument(
            f"SQL refused: {_one_line(str(exc))}: the query needs DuckDB's external access, "
            "which is off (enable_external_access=false); --allow-external opts in"
        ) from None
    except duckdb.Error as exc:
        message = _one_line(str(exc))
        if "configuration has been locked" in message:
            raise InvalidArgument(
                f"SQL refused: {message}: settings are locked (lock_configuration=true); "
                "--allow-external opts in"
            ) from None
        if first and _reading(exc):
            raise _ReadFailed from exc
        raise InvalidArgument(f"SQL: {message}") from None
    finally:
        con.close()


def _reading(exc: Exception) -> bool:
    """Whether DuckDB failed reading a registered Arrow dataset (a file of the lake)."""
    import duckdb

    text = str(exc)
    return isinstance(exc, duckdb.IOException) or (
        isinstance(exc, duckdb.InvalidInputException)
        and any(w in text for w in ("IOError", "Parquet", "checksum", "arrow_scan"))
    )


def _one_line(message: str) -> str:
    # DuckDB adds the query's line and a caret under it: the reason is enough here.
    lines = [
        line.strip()
        for line in message.splitlines()
        if line.strip() and not line.strip().startswith(("LINE ", "^"))
    ]
    return " ".join(lines[:2]) if lines else "DuckDB refused the query"
