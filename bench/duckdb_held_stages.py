"""What a DuckDB temporary table costs in memory once spilled: the resident set beside
DuckDB's own accounting as tables past its memory limit are made, then dropped.

The read's SQL runs a statement a stage at a time, each stage a temporary table
(``read.staged_sql``), under a memory limit that bounds DuckDB's buffers. A spilled
table's data leaves memory; its blocks' metadata stays, outside the limit. This makes
``--tables`` tables of ``--rows`` rows (four BIGINT columns) one after another on one
connection set as the read sets it (``read.clipped_sql.connect``, 512MB), printing after
each the process's RSS, DuckDB's memory (``duckdb_memory()``) and its temporary data,
then drops them all.

    .venv/bin/python bench/duckdb_held_stages.py [--tables 8] [--rows 50000000]

Prints figures; asserts nothing. Temporary files go to the read's spill directory and
are gone once the tables are dropped.
"""

from __future__ import annotations

import argparse
from pathlib import Path

MIB = 1 << 20


def _rss_mib() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * 4096 / MIB


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tables", type=int, default=8, help="tables made (default 8)")
    ap.add_argument("--rows", type=int, default=50_000_000, help="rows a table (default 50M)")
    a = ap.parse_args()

    from tfprof.collector.read import clipped_sql
    from tfprof.collector.read.staged_sql import MEMORY_LIMIT

    con = clipped_sql.connect()
    con.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")
    usage = "SELECT sum(memory_usage_bytes), sum(temporary_storage_bytes) FROM duckdb_memory()"
    start = _rss_mib()
    print(f"memory_limit {MEMORY_LIMIT}, RSS before any table {start:.0f} MiB")
    print(f"{'tables':>6}  {'temporary data':>14}  {'DuckDB memory':>13}  {'RSS':>9}  RSS - DuckDB")
    for i in range(a.tables):
        con.execute(
            f"CREATE TEMP TABLE held_{i} AS SELECT range AS a, range * 7 % 1000003 AS b, "
            f"range % 13 AS c, range * 3 AS d FROM range({a.rows})"
        )
        used, temp = (v or 0 for v in con.sql(usage).fetchall()[0])
        rss = _rss_mib()
        print(f"{i + 1:>6}  {temp / MIB:>10,.0f} MiB  {used / MIB:>9,.0f} MiB  "
              f"{rss:>5,.0f} MiB  {rss - used / MIB:>8,.0f} MiB")  # fmt: skip
    for i in range(a.tables):
        con.execute(f"DROP TABLE held_{i}")
    used, temp = (v or 0 for v in con.sql(usage).fetchall()[0])
    print(f"dropped: temporary data {temp / MIB:,.0f} MiB, DuckDB memory {used / MIB:,.0f} "
          f"MiB, RSS {_rss_mib():,.0f} MiB")  # fmt: skip
    con.close()


if __name__ == "__main__":
    main()
