"""The distributed views and rules read a group of processes at a time
(``read.process_groups``): three ranks of the DDP trace (one stretched 1.3x, a
straggler) give the same steps, ranks, collectives and findings read one rank at a time
as read all together."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import pytest

from tests.unit.dist_traces import DIST, stretched
from tfprof.collector.advice import launch_bound
from tfprof.collector.advice.dist_rules import NAMES, DistRules
from tfprof.collector.analysis.collective_rows import CollectivesNeed
from tfprof.collector.analysis.launch import LINKED_KERNELS
from tfprof.collector.analysis.step_rows import RanksNeed, StepsNeed
from tfprof.collector.compare.diff_read import RowsNeed
from tfprof.collector.lake.reader import open_jobs
from tfprof.collector.read import engine, process_groups
from tfprof.collector.read.lake_catalog import Catalog, catalog
from tfprof.collector.read.needs import Need, Query
from tfprof.collector.timeline.prepare import TimeWindow

CLI = [sys.executable, "-m", "tfprof.collector.cli"]


def _ranks(tmp: Path) -> Catalog:
    src = DIST / "nccl_allreduce_rank0_of2.json.gz"
    paths = []
    for rank, factor in ((0, 1.0), (1, 1.3), (2, 1.0)):
        paths.append(str(tmp / f"rank{rank}.json.gz"))
        stretched(src, Path(paths[-1]), rank, factor)
    data = str(tmp / "data")
    subprocess.run([*CLI, "import", *paths, "--job", "ddp", "--data-dir", data], check=True,
                   capture_output=True, timeout=300)  # fmt: skip
    return catalog(open_jobs([data], None).jobs, TimeWindow())


def _read(cat: Catalog) -> list[Any]:
    needs: list[Need[Any]] = [StepsNeed(), RanksNeed(), CollectivesNeed(), DistRules(NAMES)]
    _, found = engine.read(cat, needs)
    return found


def test_one_rank_at_a_time_reads_what_all_at_once_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cat = _ranks(tmp_path)
    assert len(cat.processes) == 3
    assert process_groups.groups(cat) == [[0, 1, 2]]
    together = _read(cat)
    steps, ranks, collectives, findings = together
    assert {r.task for r in ranks} == {"0", "1", "2"} and len(steps) == 6
    assert collectives and any(f.rule == "straggler" for f in findings)

    monkeypatch.setattr(process_groups, "GROUP_BYTES", 1)
    assert process_groups.groups(cat) == [[0], [1], [2]]
    assert _read(cat) == together


# launch-bound's figures as DuckDB's median and a window over every process at once give
# them (what ``advice.launch_bound`` computed before it read a group at a time).
_WHOLE = f"""
WITH steady AS (
    SELECT * FROM (
        SELECT *, row_number() OVER (
            PARTITION BY job, name ORDER BY s, process, correlation) AS launch
        FROM ({LINKED_KERNELS}))
    WHERE launch > 1
)"""
WHOLE = (
    Query(f"{_WHOLE} SELECT job, count(*), sum(d), median(d), median(latency), min(s), max(e) "
          "FROM steady GROUP BY job"),
    Query(f"{_WHOLE} SELECT job, count(*), sum(call_d), median(call_d) FROM (SELECT DISTINCT "
          "job, link, correlation, call_d FROM steady) GROUP BY job"),
    Query(f"{_WHOLE} SELECT job, call_name, count(*), min(call_s) FROM (SELECT DISTINCT job, "
          "link, correlation, call_name, call_s FROM steady) GROUP BY ALL"),
    Query(f"{_WHOLE} SELECT job, process, device, stream, count(*) FROM steady GROUP BY ALL"),
)  # fmt: skip
GROUPED = (launch_bound.KERNELS, launch_bound.CALLS, launch_bound.CALL_NAMES, launch_bound.TRACKS)


def test_launch_bound_figures_read_a_rank_at_a_time_equal_the_whole_statement(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cat = _ranks(tmp_path)
    monkeypatch.setattr(process_groups, "GROUP_BYTES", 1)
    _, (whole, grouped) = engine.read(cat, [RowsNeed(WHOLE), RowsNeed(GROUPED)])
    whole, grouped = [sorted(r) for r in whole], [sorted(r) for r in grouped]
    kernels = whole[0]
    assert kernels and kernels[0][1] > 1000  # the job's steady kernels, three ranks'
    assert grouped == whole


def test_median_from_value_counts_is_duckdbs_median() -> None:
    # odd and even counts, repeated values, the two middle values apart and equal
    values = {1: [5, 1, 9, 5], 2: [4, 2, 10, 5], 3: [7], 4: [3, 1, 8, 6, 7, 100, 1]}
    con = duckdb.connect()
    con.execute("CREATE TABLE t (job BIGINT, v BIGINT)")
    con.executemany("INSERT INTO t VALUES (?, ?)", [(j, v) for j, vs in values.items() for v in vs])
    stages = launch_bound.median_stages("m", "SELECT * FROM t", "v").lstrip(",")
    ours = con.sql(f"WITH {stages} SELECT job, (lo + hi) / 2 FROM m ORDER BY job").fetchall()
    theirs = con.sql("SELECT job, median(v) FROM t GROUP BY job ORDER BY job").fetchall()
    assert ours == theirs == [(1, 5.0), (2, 4.5), (3, 7.0), (4, 6.0)]
