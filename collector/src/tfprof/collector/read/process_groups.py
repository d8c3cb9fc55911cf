"""Queries that read each process apart (``Query.by_process``), run a group of processes
at a time.

The distributed views' statements (steps, collectives, arrivals) sort and join every
record of a rank several times over. Over a fleet's lake in one statement, DuckDB's
stages held every rank's records at once: at 64 ranks x 1M GPU records a stage could not
be made within the read's memory limit (bench/results/cpu-dist-scale.txt). Each stage
is keyed by process, so the same statement over a group of processes gives exactly
those processes' rows: the engine runs it group after group, each group's relations
listing only its processes' files, and a group's stages are dropped before the next
is made. Groups are processes in catalog order, closed when their stored Parquet
bytes reach ``GROUP_BYTES``; a process larger than that is a group of its own.

A query with ``gather`` runs its stages up to that one per group, adding that stage's
rows to one table; its later stages and final SELECT then run once over the table.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tfprof.collector.lake.fs import Lake
from tfprof.collector.lake.lake_stream import GPU_TABLES, HOST_TABLES
from tfprof.collector.lake.sql_stages import stages
from tfprof.collector.read import clipped_sql, staged_sql
from tfprof.collector.read.lake_catalog import Catalog
from tfprof.collector.read.needs import Query
from tfprof.collector.read.staged_sql import StagedRunner

if TYPE_CHECKING:
    import duckdb

# Stored Parquet bytes of a group of processes. A whole process of 10M GPU records
# (582 MB stored) runs every distributed statement within the read's DuckDB limit
# (``staged_sql.MEMORY_LIMIT``); a group of a quarter of that leaves the margin.
GROUP_BYTES = 128 << 20
_TABLES = (*GPU_TABLES, *HOST_TABLES, "steps")


def _stored_bytes(cat: Catalog) -> list[int]:
    """Per process, the bytes of its stored files and log-tail rows (one listing call per
    lake: a remote lake answers the files' sizes together)."""
    sizes = [0] * len(cat.processes)
    files: dict[int, tuple[Lake, list[tuple[int, str]]]] = {}
    for p in range(len(cat.processes)):
        for rows in cat.tables_of(p, _TABLES):
            for lake, path in rows.files:
                files.setdefault(id(lake), (lake, []))[1].append((p, path))
            sizes[p] += sum(t.nbytes for t in rows.tails)
    for lake, where in files.values():
        infos = lake.fs.get_file_info([path for _, path in where])
        for (p, _), info in zip(where, infos, strict=True):
            sizes[p] += max(info.size or 0, 0)
    return sizes


def groups(cat: Catalog) -> list[list[int]]:
    """The processes of ``cat`` in groups of at most ``GROUP_BYTES`` stored bytes (a
    larger process alone), in catalog order; the processes of one link group (whose
    launches link, ``Catalog.link_groups``) in one group."""
    units: dict[int, list[int]] = {}
    for p, link in enumerate(cat.link_groups):
        units.setdefault(link, []).append(p)
    if len(units) <= 1:
        return [[p for unit in units.values() for p in unit]]  # one or none: nothing to split
    stored = _stored_bytes(cat)
    out: list[list[int]] = []
    size = 0
    for unit in units.values():
        unit_bytes = sum(stored[p] for p in unit)
        if not out or size + unit_bytes > GROUP_BYTES:
            out.append([])
            size = 0
        out[-1].extend(unit)
        size += unit_bytes
    return out


def _text(name_body: Sequence[tuple[str, str]], final: str) -> str:
    if not name_body:
        return final
    return "WITH " + ", ".join(f"{n} AS ({b})" for n, b in name_body) + "\n" + final


def _split(query: Query) -> tuple[str, str]:
    """A gathering query as (the statement run per group: its stages up to ``gather``,
    selecting that stage's rows; the statement run once over them)."""
    parts, final = stages(query.sql)
    names = [n for n, _ in parts]
    if query.gather not in names:
        raise ValueError(f"no stage {query.gather!r} to gather in {names}")
    cut = names.index(query.gather) + 1
    return _text(parts[:cut], f"SELECT * FROM {query.gather}"), _text(parts[cut:], final)


def run(
    con: duckdb.DuckDBPyConnection,
    runner: StagedRunner,
    cat: Catalog,
    queries: Sequence[Query],
) -> dict[Query, list[tuple[Any, ...]]]:
    """Each grouped query's rows (``Query.grouped``), run a group of processes at a time."""
    out: dict[Query, list[tuple[Any, ...]]] = {q: [] for q in queries}
    # Per group, one statement per distinct text: whole queries, and the per-group part
    # of gathering ones (queries gathering the same stages share it).
    per_group: list[str] = []
    gathered: dict[str, str] = {}  # per-group text -> the table its rows go to
    rest: dict[Query, tuple[str, str]] = {}  # gathering query -> (table, remaining text)
    for q in queries:
        if q.gather is None:
            per_group.append(q.sql)
            continue
        head, tail = _split(q)
        if head not in gathered:
            gathered[head] = f"tfprof_gathered_{len(gathered)}"
            per_group.append(head)
        rest[q] = (gathered[head], tail)
    per_group = list(dict.fromkeys(per_group))
    for i, members in enumerate(groups(cat)):
        relations = clipped_sql.Relations(con, cat, members)
        try:
            texts = [clipped_sql.bind(t, relations, cat.window) for t in per_group]
            for j, then in staged_sql.plan(texts):
                sql = per_group[j]
                if sql in gathered:
                    runner.into(texts[j], gathered[sql], create=i == 0, then=then)
                    continue
                rows = runner.rows(texts[j], then)
                for q in queries:
                    if q.gather is None and q.sql == sql:
                        out[q].extend(rows)
        finally:
            runner.reset()
            relations.close()
    # The gathered stage now stands for itself: each gathering query's later stages
    # read the table under the stage's name.
    everyone = clipped_sql.Relations(con, cat)
    try:
        for table in gathered.values():
            users = [q for q, (t, _) in rest.items() if t == table]
            assert all(q.gather == users[0].gather for q in users)
            con.execute(f"ALTER TABLE {table} RENAME TO {users[0].gather}")
            try:
                texts = [clipped_sql.bind(rest[q][1], everyone, cat.window) for q in users]
                for j, then in staged_sql.plan(texts):
                    out[users[j]] = runner.rows(texts[j], then)
            finally:
                runner.reset()
                con.execute(f"DROP TABLE IF EXISTS {users[0].gather}")
    finally:
        everyone.close()
    return out
