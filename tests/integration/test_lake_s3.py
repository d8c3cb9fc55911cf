"""One ``s3://`` lake written by two real collectors at once (a real S3 server on
127.0.0.1, tests/s3_server.py): ``jobs``, ``sql`` and ``summary`` over the URL see both
collectors' runs, record for record what their logs hold, in uniquely named segments."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import clean_env, collector_cmd
from tests.integration.two_collectors import write_lake
from tests.s3_server import S3Server, s3_server
from tfprof.collector.jobdata import StreamData
from tfprof.collector.lake.fs import list_parquet, open_lake
from tfprof.collector.lake.schema import RECORD_TABLES, TABLES
from tfprof.collector.lake.segments import SegmentName
from tfprof.collector.store import Store
from tfprof.core.records import RecordKind

BUCKET = "tfprof-lake"
LAKE = f"s3://{BUCKET}/cluster"


@dataclass(frozen=True)
class Cluster:
    server: S3Server
    data_dirs: dict[str, Path]

    def streams(self) -> list[StreamData]:
        """Every stream as the collectors' logs hold it (the logs alone)."""
        return [s for d in self.data_dirs.values() for j in Store(d).load_jobs() for s in j.streams]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("s3-cluster")
    with s3_server() as server:
        server.create_bucket(BUCKET)
        data_dirs = write_lake(root, LAKE, server.env)
        with pytest.MonkeyPatch.context() as env:
            for name, value in server.env.items():
                env.setenv(name, value)
            yield Cluster(server, data_dirs)


def collector(cluster: Cluster, *args: str) -> str:
    run = subprocess.run(collector_cmd(*args), env=clean_env(**cluster.server.env),
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert run.returncode == 0, run.stderr
    return run.stdout


def sql(cluster: Cluster, query: str, *sources: str) -> list[dict[str, Any]]:
    args = [a for s in sources or (LAKE,) for a in ("--data-dir", s)]
    rows: list[dict[str, Any]] = json.loads(
        collector(cluster, "sql", query, *args, "--format", "json")
    )
    return rows


def test_both_collectors_publish_uniquely_named_segments(cluster: Cluster) -> None:
    lake = open_lake(LAKE)
    files = [i for t in TABLES for i in list_parquet(lake, t)]
    segments = [SegmentName.parse(i.base_name) for i in files]
    assert all(segments) and len({i.path for i in files}) == len(files)
    assert len({s.collector for s in segments if s}) == 2
    for d in cluster.data_dirs.values():
        assert (d / "lake.url").read_text().strip() == LAKE
        assert not (d / "lake").exists()  # nothing went to the default local lake


def test_sql_and_jobs_over_s3_hold_every_logged_record_once(cluster: Cluster) -> None:
    streams = cluster.streams()
    for kind, table in RECORD_TABLES.items():
        logged = sum(int((s.records["kind"] == kind).sum()) for s in streams)
        assert sql(cluster, f"SELECT count(*) AS n FROM {table.name}")[0]["n"] == logged
    assert sql(cluster, "SELECT count(*) AS n FROM goodbyes")[0]["n"] == len(streams)
    # Kernel by kernel: (job, name, start, duration) as the logs hold them.
    logged_kernels = Counter(
        (s.job, s.strings[int(n)], int(t) + s.record_shift_ns, int(d))
        for s in streams
        for n, t, d in zip(*(s.records[c][s.records["kind"] == RecordKind.KERNEL]
                             for c in ("name", "start_ns", "duration_ns")), strict=True)
    )  # fmt: skip
    query = "SELECT job, name, start_ns, duration_ns FROM kernels"
    lake_kernels = Counter(tuple(r.values()) for r in sql(cluster, query))
    assert lake_kernels == logged_kernels and sum(lake_kernels.values()) > 0
    # The data dirs name the S3 lake: read through them, the same rows.
    dirs = [str(d) for d in cluster.data_dirs.values()]
    assert Counter(tuple(r.values()) for r in sql(cluster, query, *dirs)) == logged_kernels
    listing = collector(cluster, "jobs", "--data-dir", LAKE)
    assert listing.count("finished") == 3
    runs = sql(cluster, "SELECT job, collectors FROM runs ORDER BY job")
    assert [r["job"] for r in runs] == ["eval", "train", "train"]


def test_summary_over_s3_is_the_logs_summary(cluster: Cluster) -> None:
    streams = cluster.streams()
    expected: dict[tuple[str, str], list[int]] = {}
    for s in streams:
        kernels = s.records["kind"] == RecordKind.KERNEL
        for name, duration in zip(s.records["name"][kernels], s.records["duration_ns"][kernels],
                                  strict=True):  # fmt: skip
            counts = expected.setdefault((s.job, s.strings[int(name)]), [0, 0])
            counts[0] += 1
            counts[1] += int(duration)
    summed: dict[tuple[str, str], list[int]] = {}
    for job in ("train", "eval"):
        out = collector(cluster, "summary", "--data-dir", LAKE, "--job", job,
                        "--view", "kernels", "--format", "json")  # fmt: skip
        for row in json.loads(out)["rows"]:
            counts = summed.setdefault((job, row["name"]), [0, 0])
            counts[0] += row["count"]
            counts[1] += round(row["total_us"] * 1000)
    assert summed == expected
    assert sum(c for c, _ in expected.values()) > 0


def test_export_over_s3_holds_every_logged_kernel(cluster: Cluster, tmp_path: Path) -> None:
    import numpy as np

    from tfprof.readers import load_trace

    out = tmp_path / "lake.json"
    collector(cluster, "export", "--data-dir", LAKE, "-o", str(out))
    trace = load_trace(out)
    cols = {
        c: np.frombuffer(trace.columns[c], dtype=np.int64) for c in ("kind", "name", "duration_ns")
    }
    kernels = cols["kind"] == RecordKind.KERNEL
    exported = Counter(
        (trace.names[int(n)], int(d))
        for n, d in zip(cols["name"][kernels], cols["duration_ns"][kernels], strict=True)
    )
    logged: Counter[tuple[str, int]] = Counter()
    for s in cluster.streams():
        k = s.records["kind"] == RecordKind.KERNEL
        for n, d in zip(s.records["name"][k], s.records["duration_ns"][k], strict=True):
            logged[(s.strings[int(n)], int(d))] += 1
    assert exported == logged and sum(logged.values()) > 0
