"""The distributed views' SQL on a real standalone Spark cluster of local processes (one
master, two one-core workers: ``spark_cluster``) over a lake's real Parquet files: two
ranks of the DDP trace imported as one job (rank 1 stretched 1.3x) and compacted.

Spark's ``step_breakdown`` equals DuckDB's (``sql``) row for row, the per-rank figures a
Spark user aggregates from it equal ``summary --view ranks``, its per-rank arrivals equal
DuckDB's over ``collective_arrivals``, and they name the straggler ``advise`` names, with
the same counts and waits. The statements are the text the CLI runs (``LAKE.bind``), run
one CTE at a time (``lake.sql_stages``), each stage checkpointed, as
docs/guides/distributed-jobs.md tells a Spark user to run them.

The JVMs are bounded: the driver's heap at 1 GiB, each executor's at 512 MiB (all a
worker offers), the master's and workers' at 256 MiB (``spark_cluster``). Without Java or
pyspark the test skips; ``.ci/run`` installs both (scripts/install_spark.sh)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.integration.conftest import clean_env, collector_cmd
from tests.integration.spark_cluster import standalone_cluster, wait_for_executors
from tests.unit.dist_traces import DIST, stretched
from tfprof.collector.analysis.step_rows import nearest_rank, warmup_flags
from tfprof.collector.analysis.units import pct, us
from tfprof.collector.lake.collective_sql import RANK_ARRIVALS, WINDOW_ARRIVALS
from tfprof.collector.lake.dist_sql import LAKE, STEPS
from tfprof.collector.lake.schema import TABLES
from tfprof.collector.lake.sql_stages import stages

pytestmark = pytest.mark.timeout(600)

# What the LAKE adapter reads.
INPUTS = ("kernels", "copies", "memsets", "api_calls", "markers", "steps")
ORDER = " ORDER BY rk, device, step"
# RANK_ARRIVALS' final SELECT over the view of every matched call.
DUCK_ARRIVALS = """SELECT rk, jb, count(*) AS matched, sum(skew) AS skew_sum,
  max(skew) AS skew_max, sum(was_last) AS last,
  sum(CASE WHEN was_last = 1 THEN waited ELSE 0 END) AS caused_ns
FROM collective_arrivals GROUP BY rk, jb ORDER BY rk"""


def _cli(*argv: str) -> Any:
    run = subprocess.run(collector_cmd(*argv), env=clean_env(), capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout) if "--format" in argv else run.stdout


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("dist-spark")
    src = DIST / "nccl_allreduce_rank0_of2.json.gz"
    stretched(src, tmp / "rank0.json.gz", 0, 1.0)
    stretched(src, tmp / "rank1.json.gz", 1, 1.3)
    data = tmp / "data"
    _cli("import", str(tmp / "rank0.json.gz"), str(tmp / "rank1.json.gz"), "--job", "ddp",
         "--data-dir", str(data))  # fmt: skip
    _cli("compact", "--data-dir", str(data))
    return data


def _on_spark(
    lake: Path, tmp: Path, *queries: tuple[str, str]
) -> tuple[int, list[list[dict[str, Any]]]]:
    """Executors that ran the queries, and each query's rows, on a fresh cluster."""
    with standalone_cluster(workers=2, work_dir=tmp / "cluster") as master:
        from pyspark.sql import SparkSession

        spark = (
            SparkSession.builder.master(master)
            .appName("tfprof-dist-test")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.driver.memory", "1g")
            .config("spark.executor.memory", "512m")
            .config("spark.executor.cores", "1")
            .config("spark.ui.enabled", "false")
            .config("spark.local.dir", str(tmp / "driver"))  # the driver's scratch
            # A few hundred rows per stage: 200 shuffle partitions would be 200 tasks each.
            .config("spark.sql.shuffle.partitions", "4")
            # Partition values are names, never numbers (a job called "0001").
            .config("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
            .getOrCreate()
        )
        try:
            executors = wait_for_executors(spark, 2)
            for name in INPUTS:
                path = lake / "lake" / name
                if not path.is_dir():  # a table nothing was written to: empty, typed
                    path = tmp / "empty" / name
                    path.mkdir(parents=True)
                    table = next(t for t in TABLES.values() if t.name == name)
                    pq.write_table(table.full_schema.empty_table(), path / "none.parquet")
                reader = spark.read.option("basePath", str(path))
                reader.parquet(str(path)).createOrReplaceTempView(name)
            return executors, _staged(spark, queries)
        finally:
            spark.stop()


def _staged(spark: Any, queries: tuple[tuple[str, str], ...]) -> list[list[dict[str, Any]]]:
    """Each statement run one CTE at a time (lake.sql_stages: Spark inlines CTEs, and a
    whole statement's plan does not fit its driver), each stage materialised with its
    lineage cut (a cached view's plan would still hold every stage before it). A stage
    the statements share (same name, same text) is materialised once."""
    done: dict[str, str] = {}
    out = []
    for statement, order in queries:
        ctes, final = stages(statement)
        for name, body in ctes:
            if done.get(name) != body:
                spark.sql(body).localCheckpoint(eager=True).createOrReplaceTempView(name)
                done[name] = body
        rows = spark.sql(f"SELECT * FROM ({final}) x{order}").collect()
        out.append([r.asDict() for r in rows])
    return out


def _ranks_of(steps: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """What a Spark user computes per rank from step_breakdown: the ranks view's figures
    (warm-up flags, nearest-rank percentiles, percentages of the summed device time)."""
    out = {}
    for rk in sorted({s["rk"] for s in steps}):
        mine = sorted((s for s in steps if s["rk"] == rk), key=lambda s: s["start_ns"])
        durations = [s["duration_ns"] for s in mine]
        flags = warmup_flags(durations)
        steady = [d for d, w in zip(durations, flags, strict=True) if not w] or durations
        span = sum(durations)
        total = {k: sum(s[k] for s in mine) for k in ("compute_ns", "comm_ns",
                 "comm_exposed_ns", "copy_exposed_ns")}  # fmt: skip
        idle = span - total["compute_ns"] - total["comm_exposed_ns"] - total["copy_exposed_ns"]
        comm, exposed = total["comm_ns"], total["comm_exposed_ns"]
        out[rk.split("|")[-1]] = {
            "steps": len(mine),
            "steady_steps": len(durations) - sum(flags),
            "step_p50_us": us(nearest_rank(steady, 0.5)),
            "step_p95_us": us(nearest_rank(steady, 0.95)),
            "step_max_us": us(max(steady)),
            "compute_pct": pct(total["compute_ns"], span),
            "comm_pct": pct(comm, span),
            "comm_exposed_pct": pct(exposed, span),
            "overlap_pct": pct(comm - exposed, comm) if comm else None,
            "non_compute_pct": pct(exposed + total["copy_exposed_ns"], span),
            "idle_pct": pct(idle, span),
        }
    return out


def test_spark_cluster_gets_the_clis_per_rank_figures(lake: Path, tmp_path: Path) -> None:
    executors, (spark_steps, spark_arrivals, spark_window) = _on_spark(
        lake,
        tmp_path,
        (LAKE.bind(STEPS), ORDER),
        (LAKE.bind(RANK_ARRIVALS), " ORDER BY rk"),
        (LAKE.bind(WINDOW_ARRIVALS), " ORDER BY rk"),
    )
    assert executors == 2  # one per worker: the stages ran on the cluster
    # row for row what DuckDB answers over the same files
    duck_steps = _cli("sql", "SELECT * FROM step_breakdown" + ORDER, "--data-dir", str(lake),
                      "--format", "json")  # fmt: skip
    assert len(spark_steps) == len(duck_steps) == 4  # two complete steps per rank
    assert spark_steps == duck_steps
    # per rank: what summary --view ranks says
    view = _cli("summary", "--data-dir", str(lake), "--view", "ranks", "--format", "json")
    by_spark = _ranks_of(spark_steps)
    assert set(by_spark) == {r["task"] for r in view["rows"]} == {"0", "1"}
    for row in view["rows"]:
        assert by_spark[row["task"]] == {k: row[k] for k in by_spark[row["task"]]}
    # arrivals: DuckDB's per rank, and the straggler advise names, with its figures
    duck_arrivals = _cli("sql", DUCK_ARRIVALS, "--data-dir", str(lake), "--format", "json")
    assert spark_arrivals == duck_arrivals
    found = _cli("advise", "--data-dir", str(lake), "--rule", "straggler", "--format", "json")
    (straggler,) = found["findings"]
    evidence = straggler["evidence"]
    worst = max(spark_arrivals, key=lambda r: r["caused_ns"])
    assert worst["rk"].split("|")[-1] == evidence["rank"] == "1"  # the stretched rank
    assert (worst["matched"], worst["last"]) == (evidence["collectives"], evidence["arrived_last"])
    assert us(worst["caused_ns"]) == evidence["others_waited_us"] > 0
    assert us(worst["skew_max"]) == evidence["max_skew_us"]
    assert us(worst["skew_sum"] / worst["matched"]) == evidence["mean_skew_us"]
    last = {r["rk"].split("|")[-1]: (r["matched"], r["last"]) for r in spark_arrivals}
    assert last == {"0": (evidence["collectives"], 0), "1": last["1"]}
    # the live figures' matching (by step and order in it) sees the same on whole steps
    assert {r["rk"].split("|")[-1]: (r["matched"], r["last"]) for r in spark_window} == last
