"""A lake on a real S3 server (moto's, on 127.0.0.1; tests/s3_server.py) through
pyarrow's S3FileSystem: compaction publishes there exactly what it publishes locally,
readers of ``s3://`` get the same rows, an upload that fails half way publishes nothing,
and a compaction redone after a crash replaces what it half published."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.s3_server import S3Server, s3_server
from tests.unit.lake_streams import first_batch, records_batch, write_stream
from tfprof.collector.analysis.view_table import read_view_report
from tfprof.collector.cli import main
from tfprof.collector.lake.fs import Lake, list_parquet, open_lake, write_parquet
from tfprof.collector.lake.location import lake_of, set_lake
from tfprof.collector.lake.publish import compact_data_dir, compact_stream
from tfprof.collector.lake.query import Engine, run_query
from tfprof.collector.lake.reader import open_jobs
from tfprof.collector.lake.schema import TABLES
from tfprof.collector.lake.segments import SegmentName, collector_id, read_watermark
from tfprof.collector.read.lake_catalog import catalog
from tfprof.collector.timeline.prepare import TimeWindow
from tfprof.core import batchlog

BUCKET = "tfprof"


@pytest.fixture(scope="module")
def server() -> Iterator[S3Server]:
    with s3_server() as running:
        running.create_bucket(BUCKET)
        yield running


@pytest.fixture
def s3_lake(
    server: S3Server, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> str:
    """An empty lake URL of its own for each test, with the server in the environment."""
    for name, value in server.env.items():
        monkeypatch.setenv(name, value)
    return f"s3://{BUCKET}/{request.node.name}"


def compact(data_dir: Path, lake: Lake) -> None:
    _done, failed = compact_data_dir(data_dir, lake, collector_id(data_dir))
    assert not failed


def rows(source: str, table: str) -> list[dict[str, Any]]:
    order = ", ".join(c for c in ("job", "run", "stream_id", "start_ns", "time_ns", "ordinal")
                      if c in TABLES[table].full_schema.names)  # fmt: skip
    result: list[dict[str, Any]] = run_query(
        Engine([source]), f"SELECT * FROM {table} ORDER BY {order}"
    ).to_pylist()
    return result


def test_s3_holds_what_a_local_lake_holds_and_reads_back_the_same(
    tmp_path: Path, s3_lake: str, capsys: pytest.CaptureFixture[str]
) -> None:
    remote, local = tmp_path / "remote", tmp_path / "local"
    write_stream(remote, [first_batch(), records_batch(2, 30_000), records_batch(3, 40_000)])
    drops = records_batch(1, 10_000, strings=["gemm", "relu"], string_base=1, dropped=4)
    write_stream(remote, [drops], stream_id="s2", finish=False)
    log = remote / "jobs/train/r1/s1/batches.log"
    offsets = [offset for offset, _ in batchlog.entries(log.read_bytes())]
    data = bytearray(log.read_bytes())
    data[offsets[1] + batchlog.HEADER.size] ^= 1  # batch 2 of s1 is damaged
    log.write_bytes(bytes(data))
    collector_id(remote)
    shutil.copytree(remote, local)  # the same data dir, same collector id
    compact(remote, set_lake(remote, s3_lake))
    compact(local, lake_of(local))
    local_lake = str(lake_of(local).root)
    for table in TABLES:
        theirs = rows(local_lake, table)
        assert rows(s3_lake, table) == theirs, table
        assert rows(str(remote), table) == theirs, table  # the data dir names its S3 lake
    assert rows(s3_lake, "log_state")  # damage and drops made it to S3 too
    # Only segments, each named by collector, stream and batches: no temporary objects.
    lake = open_lake(s3_lake)
    names = [i.base_name for t in TABLES for i in list_parquet(lake, t)]
    assert names and all(SegmentName.parse(n) for n in names)
    # summary's reader over s3:// sees the same streams, notes and figures.
    from_s3, from_disk = open_jobs([s3_lake]).jobs, open_jobs([local_lake]).jobs
    assert [(s.skipped, s.lost_records, s.dropped) for j in from_s3 for s in j.streams] == [
        (s.skipped, s.lost_records, s.dropped) for j in from_disk for s in j.streams
    ]
    for view in ("kernels", "memcpy", "streams"):
        s3, disk = catalog(from_s3, TimeWindow()), catalog(from_disk, TimeWindow())
        assert read_view_report(view, s3) == read_view_report(view, disk), view
    assert main(["jobs", "--data-dir", s3_lake]) == 0
    out = capsys.readouterr().out
    assert main(["jobs", "--data-dir", local_lake]) == 0
    assert out == capsys.readouterr().out and "checksum mismatch" in out


def test_an_upload_that_fails_half_way_publishes_nothing(
    s3_lake: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    lake = open_lake(s3_lake)
    table = pa.table({"start_ns": pa.array(range(1_000), pa.int64())})
    write = pq.ParquetWriter.write_table

    def cut_short(self: pq.ParquetWriter, t: pa.Table, row_group_size: int | None = None) -> None:
        write(self, t.slice(0, 10), row_group_size=row_group_size)  # a first row group...
        raise OSError("connection reset by peer")  # ...then the network goes

    with monkeypatch.context() as patch, pytest.raises(OSError, match="connection reset"):
        patch.setattr(pq.ParquetWriter, "write_table", cut_short)
        write_parquet(lake, "kernels/job=a/run=r/c~s~000000000001-000000000001.parquet", table)
    assert list_parquet(lake, "kernels") == []  # not a shorter, valid-looking file
    size = write_parquet(lake, "kernels/job=a/run=r/c~s~000000000001-000000000001.parquet", table)
    (info,) = list_parquet(lake, "kernels")
    assert info.size == size
    assert pq.read_table(info.path, filesystem=lake.fs).num_rows == 1_000


def test_a_compaction_redone_after_a_crash_replaces_its_half_published_range(
    tmp_path: Path, s3_lake: str
) -> None:
    stream_dir = write_stream(tmp_path, [first_batch()], finish=False)
    lake, collector = set_lake(tmp_path, s3_lake), collector_id(tmp_path)
    compact_stream(stream_dir, lake, collector)
    write_stream(tmp_path, [records_batch(2, 30_000), records_batch(3, 40_000)], finish=False)
    compact_stream(stream_dir, lake, collector)
    # As if it died after publishing batches 2-3 of some tables only.
    for table in ("copies", "memsets"):
        (path,) = [i.path for i in list_parquet(lake, table) if "000000000002-" in i.base_name]
        lake.fs.delete_file(path)
    mark = read_watermark(stream_dir)
    assert mark is not None
    mark.last_seq, mark.pending = 1, 3
    (stream_dir / "lake.json").write_text(json.dumps(mark.__dict__))
    compact_stream(stream_dir, lake, collector)
    for table in ("kernels", "copies", "memsets", "syncs", "api_calls", "markers", "memory"):
        assert len(rows(s3_lake, table)) == 3 == len(rows(str(tmp_path), table)), table
    ranges = sorted(i.base_name.split("~")[2] for i in list_parquet(lake, "copies"))
    assert ranges == ["000000000001-000000000001.parquet", "000000000002-000000000003.parquet"]
