"""lake.sql_stages: a WITH statement cut into its CTEs and final SELECT, each stage run
on its own (what Spark needs, tests/integration/test_dist_spark.py) gives the whole
statement's rows: checked with DuckDB over a data dir holding two real ranks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.dist_traces import DIST, stretched
from tfprof.collector.lake.collective_sql import RANK_ARRIVALS, WINDOW_ARRIVALS
from tfprof.collector.lake.dist_sql import LAKE, STEPS
from tfprof.collector.lake.query import Engine
from tfprof.collector.lake.sql_stages import stages

CLI = [sys.executable, "-m", "tfprof.collector.cli"]


def test_comments_and_literals_do_not_cut_a_stage() -> None:
    ctes, final = stages(
        "WITH a AS (SELECT ')' AS x -- a comment (with a paren\n FROM t), "
        "b AS (SELECT (1 + (2)) AS y FROM a)\nSELECT * FROM b"
    )
    assert ctes == [("a", "SELECT ')' AS x -- a comment (with a paren\n FROM t"),
                    ("b", "SELECT (1 + (2)) AS y FROM a")]  # fmt: skip
    assert final == "SELECT * FROM b"
    assert stages("SELECT 1") == ([], "SELECT 1")


@pytest.fixture(scope="module")
def ddp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp_path = tmp_path_factory.mktemp("stages")
    src = DIST / "nccl_allreduce_rank0_of2.json.gz"
    stretched(src, tmp_path / "rank0.json.gz", 0, 1.0)
    stretched(src, tmp_path / "rank1.json.gz", 1, 1.3)
    subprocess.run([*CLI, "import", str(tmp_path / "rank0.json.gz"),
                    str(tmp_path / "rank1.json.gz"), "--job", "ddp", "--data-dir",
                    str(tmp_path / "data")], check=True, capture_output=True,
                   timeout=300)  # fmt: skip
    return tmp_path / "data"


@pytest.mark.parametrize("statement", [STEPS, RANK_ARRIVALS, WINDOW_ARRIVALS])
def test_staged_statements_give_the_whole_statements_rows(statement: str, ddp: Path) -> None:
    con = Engine([str(ddp)], allow_external=True).connect()
    whole = sorted(con.execute(LAKE.bind(statement)).fetchall())
    ctes, final = stages(LAKE.bind(statement))
    assert len(ctes) > 30
    for name, body in ctes:
        con.execute(f"CREATE TEMP TABLE {name} AS {body}")
    assert whole and sorted(con.execute(final).fetchall()) == whole
