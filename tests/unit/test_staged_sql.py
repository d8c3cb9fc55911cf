"""The read's SQL a stage at a time (``read.staged_sql``) on real DuckDB: the same rows as
the statement run whole, stages shared by statements that begin alike, a statement that
runs out of memory under the limit run again without it; and the private spill
directory (``lake.spill_dir``)."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import duckdb
import pytest

from tfprof.collector.lake.spill_dir import spill_dir
from tfprof.collector.lake.sql_stages import stages
from tfprof.collector.read import staged_sql
from tfprof.collector.read.staged_sql import StagedRunner

BASE = (
    "WITH t AS (SELECT range AS i, range % 7 AS k FROM range(100000)), "
    "u AS (SELECT k, count(*) AS n, sum(i) AS s FROM t GROUP BY k)"
)
BY_K = f"{BASE} SELECT k, n, s FROM u ORDER BY k"
TOP = f"{BASE}, v AS (SELECT k, s FROM u WHERE n > 14285) SELECT max(s) FROM v"


def test_stages_give_the_rows_of_the_whole_statement() -> None:
    con = duckdb.connect()
    runner = StagedRunner(con)
    assert runner.rows(BY_K) == con.sql(BY_K).fetchall()
    assert runner.rows(TOP) == con.sql(TOP).fetchall()
    assert runner.rows("SELECT 41 + 1") == [(42,)]


class Spy:
    """``con`` that notes each stage made and dropped, in order."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.real = con
        self.events: list[str] = []

    def __getattr__(self, name: str) -> object:
        return getattr(self.real, name)

    def execute(self, sql: str) -> object:
        if sql.startswith("CREATE TEMP TABLE"):
            self.events.append("make " + sql.split()[3])
        elif sql.startswith("DROP TABLE"):
            self.events.append("drop " + sql.split()[-1])
        return self.real.execute(sql)

    def sql(self, query: str) -> duckdb.DuckDBPyRelation:
        self.events.append("final")
        return self.real.sql(query)


def test_a_shared_prefix_is_made_once() -> None:
    con = duckdb.connect()
    runner = StagedRunner(con)
    spy = Spy(con)
    runner.con = spy  # type: ignore[assignment]
    texts = [TOP, "SELECT 1", BY_K]
    plan = staged_sql.plan(texts)
    assert [(texts[i], then) for i, then in plan] == [("SELECT 1", BY_K), (BY_K, TOP), (TOP, None)]
    got = {i: runner.rows(texts[i], then) for i, then in plan}
    assert got == {i: con.sql(t).fetchall() for i, t in enumerate(texts)}
    made = [e for e in spy.events if e.startswith("make")]
    assert made == ["make t", "make u", "make v"]  # t and u once, for both statements


A = "a AS (SELECT range AS i FROM range(1000))"
B = "b AS (SELECT i, i % 3 AS k FROM a)"
CHAIN = (
    f"WITH {A}, {B}, "
    "c AS (SELECT k, count(*) AS n FROM b GROUP BY k), "
    "d AS (SELECT max(n) AS top FROM c) "
    "SELECT c.k, c.n, d.top FROM c, d ORDER BY c.k"
)
READS_B = f"WITH {A}, {B}, e AS (SELECT count(*) AS n FROM b) SELECT n FROM e"
READS_A = f"WITH {A}, {B}, f AS (SELECT count(*) AS n FROM a) SELECT n FROM f"


def test_a_stage_goes_once_nothing_still_to_run_reads_it() -> None:
    parts, final = stages(CHAIN)
    assert staged_sql.last_readers(parts, final) == [1, 2, 4, 4]
    con = duckdb.connect()
    runner = StagedRunner(con)
    spy = Spy(con)
    runner.con = spy  # type: ignore[assignment]
    assert runner.rows(CHAIN) == con.sql(CHAIN).fetchall()
    assert spy.events == [
        "make a", "make b", "drop a", "make c", "drop b", "make d",
        "final", "drop c", "drop d",
    ]  # fmt: skip
    # The next statement begins with a and b and reads b past them: b is kept for it,
    # a goes once b is made.
    spy.events.clear()
    assert runner.rows(CHAIN, then=READS_B) == con.sql(CHAIN).fetchall()
    assert spy.events == [
        "make a", "make b", "drop a", "make c", "make d", "final", "drop c", "drop d",
    ]  # fmt: skip
    spy.events.clear()
    assert runner.rows(READS_B) == [(1000,)]
    assert spy.events == ["make e", "drop b", "final", "drop e"]


def test_a_dropped_stage_a_statement_reads_is_made_again() -> None:
    con = duckdb.connect()
    runner = StagedRunner(con)
    spy = Spy(con)
    runner.con = spy  # type: ignore[assignment]
    runner.rows(CHAIN, then=READS_B)  # a dropped: READS_B never reads it past b
    spy.events.clear()
    assert runner.rows(READS_A) == [(1000,)]  # not the statement announced: reads a
    assert spy.events == [
        "drop b", "make a", "make b", "drop b", "make f", "drop a", "final", "drop f",
    ]  # fmt: skip


def test_out_of_memory_runs_again_without_the_limit(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(staged_sql, "MEMORY_LIMIT", "1MB")
    con = duckdb.connect()
    con.execute("SET threads = 1")
    runner = StagedRunner(con)
    limit = "SELECT current_setting('memory_limit')"
    (capped,) = con.execute(limit).fetchall()
    big = ("WITH t AS (SELECT range AS i, repeat('x', 64) || range AS s FROM range(200000)) "
           "SELECT count(DISTINCT s), max(i) FROM t")  # fmt: skip
    with caplog.at_level(logging.WARNING, "tfprof.collector.read"):
        assert runner.rows(big) == [(200000, 199999)]
    (line,) = [r.getMessage() for r in caplog.records]
    assert "stage t" in line and "ran out of DuckDB's 1MB" in line
    assert con.execute(limit).fetchall() == [capped]  # the limit is back for the next


def test_spill_directory_is_private(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    mine = Path(spill_dir())
    assert mine == tmp_path / f"tfprof-duckdb-{os.getuid()}"
    assert stat.S_IMODE(mine.stat().st_mode) == 0o700
    assert Path(spill_dir()) == mine  # kept for the next read
    mine.chmod(0o777)  # made by someone else first, open to all: not used
    other = Path(spill_dir())
    assert other != mine and other.parent == tmp_path
    assert stat.S_IMODE(other.stat().st_mode) == 0o700
