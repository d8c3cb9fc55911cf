"""``tfprof-collector sql``: run SQL over the lake's tables with DuckDB (embedded).

Every table of the lake (docs/reference/lake.md) is a view, and so are
``kernel_summary``, ``copy_summary``, ``gpu_busy``, ``jobs``, ``runs`` and ``tasks``.
``--data-dir`` takes collector data dirs (their lake, plus what their logs hold that is
not compacted yet), lake directories and lake URLs, as many as wanted: they are read
as one.
"""

from __future__ import annotations

import argparse
import sys
from decimal import Decimal
from typing import TYPE_CHECKING, TextIO

from tfprof.collector.errors import InvalidArgument

if TYPE_CHECKING:
    import pyarrow as pa

FORMATS = ("table", "csv", "json", "parquet")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "sql",
        help="run SQL (DuckDB) over stored records: kernels, copies, jobs, kernel_summary...",
        description="Run one SQL query (DuckDB's dialect) over the lake's tables (kernels, "
        "copies, memsets, syncs, api_calls, markers, memory, host_samples, stacks, "
        "stack_samples, streams, goodbyes, devices, log_state, capture_windows) and views "
        "(kernel_summary, copy_summary, gpu_busy, jobs, runs, tasks) of every --data-dir "
        "given. Times are ns on the collector clock.",
    )
    p.add_argument("query", metavar="SQL", help='the query, e.g. "SELECT * FROM kernel_summary"')
    p.add_argument(
        "--data-dir",
        dest="data_dirs",
        action="append",
        required=True,
        metavar="DIR",
        help="collector data dir, lake directory or lake URL (file://, s3://, gs://); "
        "repeat to query several as one",
    )
    p.add_argument(
        "--format",
        choices=FORMATS,
        default="table",
        help="table (aligned text), csv, json (an array of objects) or parquet (needs -o)",
    )
    p.add_argument(
        "-o", "--output", metavar="FILE", help="write the result here (default: standard output)"
    )
    p.add_argument(
        "--allow-external",
        action="store_true",
        help="let the query read and write files (read_csv, COPY ... TO, ATTACH), load "
        "extensions and change settings: off by default, the query reads the lake only "
        "(DuckDB's enable_external_access=false, lock_configuration=true)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tfprof.collector.lake.query import Engine, run_query

    if args.format == "parquet" and not args.output:
        raise InvalidArgument("--format parquet needs -o FILE")
    engine = Engine(args.data_dirs, allow_external=args.allow_external)
    result = run_query(engine, args.query)
    if args.format == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(result, args.output, compression="zstd")
    elif args.output:
        with open(args.output, "w", encoding="utf-8", newline="") as out:
            _write(result, args.format, out)
    else:
        _write(result, args.format, sys.stdout)
    for what in engine.skipped:
        print(f"tfprof-collector: warning: left out {what}", file=sys.stderr)
    return 0


def _write(result: pa.Table, fmt: str, out: TextIO) -> None:
    rows = result.to_pylist()
    if fmt == "json":
        import orjson

        out.write(orjson.dumps(rows, default=_json_value, option=orjson.OPT_INDENT_2).decode())
        out.write("\n")
    elif fmt == "csv":
        import csv

        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(result.column_names)
        writer.writerows(["" if v is None else v for v in row.values()] for row in rows)
    else:
        from tfprof.collector.terminal import TextWriter

        right = [_numeric(result.schema.field(i).type) for i in range(result.num_columns)]
        cells = [[_cell(v) for v in row.values()] for row in rows]
        TextWriter(out).table(result.column_names, cells, right)


def _json_value(value: object) -> object:
    """What orjson leaves to us: DuckDB's 128-bit sums arrive as Decimal."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return str(value)


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        # Fixed point, as wide as needed: an average of nanoseconds stays readable.
        return f"{value:.3f}".rstrip("0").rstrip(".") if abs(value) < 1e18 else f"{value:g}"
    return str(value)


def _numeric(type_: pa.DataType) -> bool:
    import pyarrow as pa

    return bool(
        pa.types.is_integer(type_) or pa.types.is_floating(type_) or pa.types.is_decimal(type_)
    )
