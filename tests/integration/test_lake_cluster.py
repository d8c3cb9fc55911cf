"""One lake written by two real collectors at once, read as one by ``sql``, ``jobs``,
``summary`` and a real standalone Spark cluster: every answer agrees record for record."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import clean_env, collector_cmd
from tests.integration.spark_cluster import standalone_cluster, wait_for_executors
from tests.integration.two_collectors import RUNS, write_lake
from tfprof.collector.lake.schema import RECORD_TABLES
from tfprof.collector.lake.views import KERNEL_SUMMARY
from tfprof.collector.store import Store


@dataclass(frozen=True)
class Cluster:
    data_dirs: dict[str, Path]
    lake: Path


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Cluster:
    root = tmp_path_factory.mktemp("lake-cluster")
    lake = root / "lake"
    data_dirs = write_lake(root, str(lake))
    return Cluster(data_dirs, lake)


def sql(query: str, *sources: Path | str) -> list[dict[str, Any]]:
    args = [a for s in sources for a in ("--data-dir", str(s))]
    run = subprocess.run(collector_cmd("sql", query, *args, "--format", "json"),
                         env=clean_env(), capture_output=True, text=True, timeout=120)  # fmt: skip
    assert run.returncode == 0, run.stderr
    rows: list[dict[str, Any]] = json.loads(run.stdout)
    return rows


ORDERED_SUMMARY = f"SELECT * FROM ({KERNEL_SUMMARY}) ORDER BY job, name"


def test_two_collectors_publish_into_one_lake_without_coordination(cluster: Cluster) -> None:
    collectors = {r["collector"] for r in sql("SELECT collector FROM streams", cluster.lake)}
    assert len(collectors) == 2
    by_lake = sql(ORDERED_SUMMARY, cluster.lake)
    assert by_lake == sql(ORDERED_SUMMARY, *cluster.data_dirs.values())
    assert by_lake == sql(ORDERED_SUMMARY, cluster.lake, *cluster.data_dirs.values())
    # Both runs of "train" (one per collector) are in it, each stored once.
    runs = sql("SELECT job, run, records, collectors, state FROM runs ORDER BY job", cluster.lake)
    assert [(r["job"], r["state"]) for r in runs] == [
        ("eval", "finished"), ("train", "finished"), ("train", "finished"),
    ]  # fmt: skip
    # Every record the collectors' logs hold is in the lake once, in its kind's table.
    streams = [s for d in cluster.data_dirs.values() for j in Store(d).load_jobs()
               for s in j.streams]  # fmt: skip
    for kind, table in RECORD_TABLES.items():
        logged = sum(int((s.records["kind"] == kind).sum()) for s in streams)
        assert sql(f"SELECT count(*) AS n FROM {table.name}", cluster.lake)[0]["n"] == logged
    assert sql("SELECT count(*) AS n FROM streams", cluster.lake)[0]["n"] == len(streams)
    assert sql("SELECT count(*) AS n FROM goodbyes", cluster.lake)[0]["n"] == len(streams)
    listing = subprocess.run(
        collector_cmd("jobs", "--data-dir", str(cluster.lake)),
        env=clean_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert listing.returncode == 0 and listing.stdout.count("finished") == 3


def test_sql_agrees_with_summary_record_for_record(cluster: Cluster) -> None:
    # Each collector's data dir names the shared lake it writes into, so summary over
    # either data dir reads the whole lake: both collectors' runs of every job.
    answers = []
    jobs = sorted({j for runs in RUNS.values() for j, _ in runs})
    for data_dir in cluster.data_dirs.values():
        summed: dict[tuple[str, str], list[int]] = {}
        for job in jobs:
            run = subprocess.run(
                collector_cmd("summary", "--data-dir", str(data_dir), "--job", job,
                              "--view", "kernels", "--format", "json"),
                env=clean_env(), capture_output=True, text=True, timeout=120,
            )  # fmt: skip
            assert run.returncode == 0, run.stderr
            for row in json.loads(run.stdout)["rows"]:
                counts = summed.setdefault((job, row["name"]), [0, 0])
                counts[0] += row["count"]
                counts[1] += round(row["total_us"] * 1000)
        answers.append(summed)
    ours = sql("SELECT job, name, count, total_ns FROM kernel_summary", cluster.lake)
    for summed in answers:
        assert {(r["job"], r["name"]): [r["count"], r["total_ns"]] for r in ours} == summed


def test_spark_standalone_cluster_gets_exactly_duckdbs_answer(
    cluster: Cluster, tmp_path: Path
) -> None:
    with standalone_cluster(workers=2, work_dir=tmp_path) as master:
        from pyspark.sql import SparkSession

        spark = (
            SparkSession.builder.master(master)
            .appName("tfprof-lake-test")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.executor.memory", "512m")
            .config("spark.executor.cores", "1")
            .config("spark.ui.enabled", "false")
            # Partition values are names, never numbers (a job called "0001").
            .config("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
            .getOrCreate()
        )
        try:
            executors = wait_for_executors(spark, 2)
            path = str(cluster.lake / "kernels")
            spark.read.option("basePath", path).parquet(path).createOrReplaceTempView("kernels")
            rows = spark.sql(ORDERED_SUMMARY).collect()
        finally:
            spark.stop()
    assert executors == 2  # one per worker: the query ran on the cluster
    spark_rows = [r.asDict() for r in rows]
    duck_rows = sql(ORDERED_SUMMARY, cluster.lake)
    assert len(spark_rows) == len(duck_rows) > 0
    assert spark_rows == duck_rows
