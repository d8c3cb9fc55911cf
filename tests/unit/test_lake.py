"""collector/lake/: compacting stored streams into Parquet segments and reading them back
with DuckDB, exactly once, across crashes, restarts and several data dirs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.unit.lake_streams import (
    KINDS,
    OFFSET,
    compact,
    first_batch,
    hello,
    records_batch,
    write_stream,
)
from tfprof.collector.cli import main
from tfprof.collector.lake.compactor import Compactor
from tfprof.collector.lake.fs import list_parquet, open_lake, read_parquet
from tfprof.collector.lake.location import lake_of
from tfprof.collector.lake.publish import compact_data_dir, compact_stream
from tfprof.collector.lake.query import Engine, run_query
from tfprof.collector.lake.schema import RECORD_TABLES, TABLES
from tfprof.collector.lake.segments import SegmentName, collector_id, read_watermark
from tfprof.collector.store import Store
from tfprof.collector.store.loader import load_stream
from tfprof.proto import collector_pb2 as pb


def count(sources: list[Path] | list[str], table: str = "kernels") -> int:
    result = run_query(Engine([str(s) for s in sources]), f"SELECT count(*) AS n FROM {table}")
    return int(result.column("n")[0].as_py())


def test_every_kind_lands_in_its_table_with_the_loaders_values(tmp_path: Path) -> None:
    host = pb.Batch(seq=3)
    host.host.time_ns.extend([50, 60])
    host.host.cpu_percent.extend([1.5, 2.5])
    host.host.rss_bytes.extend([10, 20])
    host.host.threads.extend([3, 4])
    host.host.read_bytes.extend([0, 0])
    host.host.write_bytes.extend([0, 0])
    # A fresh clock estimate moves later batches' times by the difference.
    late = records_batch(2, 20_000, clock_updated=True, clock_offset_ns=OFFSET + 500,
                         devices=[pb.Device(ordinal=1, uuid="GPU-1")])  # fmt: skip
    stream_dir = write_stream(tmp_path, [first_batch(), late, host])
    compact(tmp_path)

    loaded = load_stream(stream_dir)
    assert loaded is not None
    engine = Engine([str(tmp_path)])
    for kind, table in RECORD_TABLES.items():
        rows = np.flatnonzero(loaded.records["kind"] == kind)
        got = run_query(engine, f"SELECT * FROM {table.name} ORDER BY start_ns").to_pydict()
        expected_starts = (loaded.records["start_ns"][rows] + loaded.record_shift_ns).tolist()
        assert got["start_ns"] == expected_starts, table.name
        assert got["duration_ns"] == loaded.records["duration_ns"][rows].tolist()
        assert set(got["job"]) == {"train"} and set(got["task"]) == {"3"}
        if "name" in got:
            names = [loaded.strings[i] for i in loaded.records["name"][rows]]
            assert got["name"] == names
    assert run_query(engine, "SELECT domain FROM markers").column("domain").to_pylist() == [
        "relu",
        "relu",
    ]
    samples = run_query(engine, "SELECT time_ns, cpu_percent FROM host_samples").to_pydict()
    assert samples == {"time_ns": [50 + OFFSET + 500, 60 + OFFSET + 500],
                       "cpu_percent": [1.5, 2.5]}  # fmt: skip
    devices = run_query(engine, "SELECT ordinal, uuid FROM devices ORDER BY 1").to_pylist()
    assert devices == [{"ordinal": 0, "uuid": "GPU-0"}, {"ordinal": 1, "uuid": "GPU-1"}]
    runs = run_query(engine, "SELECT * FROM runs").to_pylist()
    assert runs[0]["records"] == 2 * KINDS and runs[0]["state"] == "finished"
    assert runs[0]["dropped"] == 2


def test_narrow_types_and_dictionary_names_are_what_is_written(tmp_path: Path) -> None:
    write_stream(tmp_path, [first_batch()])
    compact(tmp_path)
    lake = lake_of(tmp_path)
    (kernels,) = list_parquet(lake, "kernels")
    schema = pq.read_schema(kernels.path)
    assert schema == TABLES["kernels"].schema
    assert str(schema.field("block_x").type) == "uint16"
    assert str(schema.field("name").type) == "dictionary<values=string, indices=int32, ordered=0>"
    assert pq.ParquetFile(kernels.path).metadata.row_group(0).column(0).compression == "ZSTD"
    assert kernels.path.endswith(
        f"kernels/job=train/run=r1/{collector_id(tmp_path)}~s1~000000000001-000000000001.parquet"
    )


def test_compacting_again_publishes_only_new_batches(tmp_path: Path) -> None:
    write_stream(tmp_path, [first_batch()], finish=False)
    compact(tmp_path)
    compact(tmp_path)  # nothing new: nothing published
    lake = lake_of(tmp_path)
    assert len(list_parquet(lake, "kernels")) == 1
    write_stream(tmp_path, [records_batch(2, 30_000), records_batch(3, 40_000)])
    compact(tmp_path)
    names = [SegmentName.parse(i.base_name) for i in list_parquet(lake, "kernels")]
    assert sorted((n.first_seq, n.last_seq) for n in names if n) == [(1, 1), (2, 3)]
    assert count([tmp_path]) == 3
    assert count([lake_of(tmp_path).root]) == 3  # the lake alone, as another engine sees it
    mark = read_watermark(tmp_path / "jobs/train/r1/s1")
    assert mark is not None and mark.last_seq == 3 and mark.goodbye and mark.pending is None


def test_a_data_dir_reads_its_log_tail_and_its_segments_once(tmp_path: Path) -> None:
    write_stream(tmp_path, [first_batch()], finish=False)
    assert count([tmp_path]) == 1  # nothing compacted: all from the log
    compact(tmp_path)
    write_stream(tmp_path, [records_batch(2, 30_000)])
    assert count([tmp_path]) == 2  # one from a segment, one from the log
    assert count([tmp_path], "goodbyes") == 1 and count([tmp_path], "streams") == 1


def test_a_crash_mid_compaction_duplicates_nothing(tmp_path: Path) -> None:
    stream_dir = write_stream(tmp_path, [first_batch(), records_batch(2, 30_000)], finish=False)
    lake, collector = lake_of(tmp_path), collector_id(tmp_path)
    compact_stream(stream_dir, lake, collector)
    # A compaction of batches 3-4 that died after publishing one table's segment: the
    # watermark still says 2, with 3-4 pending.
    write_stream(tmp_path, [records_batch(3, 40_000), records_batch(4, 50_000)], finish=False)
    compact_stream(stream_dir, lake, collector)
    mark = read_watermark(stream_dir)
    assert mark is not None and mark.last_seq == 4
    for table in ("copies", "memsets"):
        (path,) = [i.path for i in list_parquet(lake, table) if "000000000003-" in i.base_name]
        Path(path).unlink()
    mark.last_seq, mark.pending = 2, 4
    (stream_dir / "lake.json").write_text(json.dumps(mark.__dict__))
    # Batch 5 arrived meanwhile: the pending range is redone exactly, then 5 on its own.
    write_stream(tmp_path, [records_batch(5, 60_000)])
    assert count([tmp_path], "copies") == 5  # readers already see exactly once
    compact_stream(stream_dir, lake, collector)
    compact_stream(stream_dir, lake, collector)
    for table in ("kernels", "copies", "memsets", "syncs", "api_calls", "markers", "memory"):
        assert count([tmp_path], table) == 5, table
        assert count([lake.root], table) == 5, table
    ranges = sorted(i.base_name.split("~")[2] for i in list_parquet(lake, "copies"))
    assert ranges == [
        "000000000001-000000000002.parquet",
        "000000000003-000000000004.parquet",
        "000000000005-000000000005.parquet",
    ]


def test_segments_published_ahead_of_the_watermark_are_not_read_twice(tmp_path: Path) -> None:
    stream_dir = write_stream(tmp_path, [first_batch()], finish=False)
    compact_stream(stream_dir, lake_of(tmp_path), collector_id(tmp_path))
    saved = (stream_dir / "lake.json").read_text()
    write_stream(tmp_path, [records_batch(2, 30_000)], finish=False)
    compact_stream(stream_dir, lake_of(tmp_path), collector_id(tmp_path))
    # A reader that finds the watermark before this compaction moved it.
    (stream_dir / "lake.json").write_text(saved)
    assert count([tmp_path]) == 2


def test_a_value_cuda_never_makes_fails_that_stream_only(tmp_path: Path) -> None:
    bad = first_batch()
    bad.records.block_x[0] = 70_000  # over uint16
    write_stream(tmp_path, [bad], stream_id="bad")
    write_stream(tmp_path, [first_batch()], stream_id="good")
    _done, failed = compact_data_dir(tmp_path, lake_of(tmp_path), collector_id(tmp_path))
    # Quarantined with its reason, not failed again at every pass: the batch stays in
    # batches.log, out of the lake; the good stream is published.
    assert failed == []
    mark = read_watermark(tmp_path / "jobs/train/r1/bad")
    assert mark is not None and mark.last_seq == 1 and mark.pending is None
    (entry,) = mark.quarantined
    assert (entry["first"], entry["last"]) == (1, 1)
    assert "block_x 70000 does not fit uint16" in entry["reason"]
    assert count([tmp_path]) == 1
    again = compact_stream(tmp_path / "jobs/train/r1/bad", lake_of(tmp_path), "c")
    assert (again.batches, again.records) == (0, 0)
    after = read_watermark(tmp_path / "jobs/train/r1/bad")
    assert after is not None and after.quarantined == mark.quarantined


def test_a_query_for_one_job_reads_only_its_files(tmp_path: Path) -> None:
    write_stream(tmp_path, [first_batch()], job="a")
    write_stream(tmp_path, [first_batch()], stream_id="s2", job="b")
    compact(tmp_path)
    lake = lake_of(tmp_path)
    for info in list_parquet(lake, "kernels"):
        if "/job=b/" in info.path:
            Path(info.path).write_bytes(b"not parquet")
    assert count([Path(lake.root)], "kernels WHERE job = 'a'") == 1


def test_file_urls_and_several_lakes_read_as_one(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    write_stream(one, [first_batch()])
    write_stream(two, [first_batch(), records_batch(2, 30_000)], stream_id="s2")
    compact(one)
    compact(two)
    urls = [f"file://{lake_of(one).root}", f"file://{lake_of(two).root}"]
    assert open_lake(urls[0]).local
    query = "SELECT stream_id, count(*) AS count FROM kernels GROUP BY 1 ORDER BY 1"
    result = run_query(Engine(urls), query)
    assert result.to_pylist() == [{"stream_id": "s1", "count": 1}, {"stream_id": "s2", "count": 2}]


def test_the_background_compactor_publishes_finished_and_running_streams(tmp_path: Path) -> None:
    store = Store(tmp_path)
    lake = open_lake(tmp_path / "shared-lake")
    compactor = Compactor(tmp_path, lake, collector_id(tmp_path), interval_s=0)
    store.listener = compactor
    compactor.start()
    running = store.open_stream(hello("run"))
    running.append(first_batch())
    finished = store.open_stream(hello("fin"))
    finished.append(first_batch())
    finished.finish(pb.Goodbye())
    finished.close()
    compactor.stop(timeout=60)  # compacts what it was told about, running streams too
    running.close()
    assert count([Path(lake.root)]) == 2
    assert count([Path(lake.root)], "goodbyes") == 1
    assert compactor.published.records == 2 * KINDS


def test_sql_command_formats_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_stream(tmp_path, [first_batch()])
    query = "SELECT job, name, count FROM kernel_summary"
    assert main(["sql", query, "--data-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.split() == ["job", "name", "count", "train", "gemm", "1"]
    assert main(["sql", query, "--data-dir", str(tmp_path), "--format", "csv"]) == 0
    assert capsys.readouterr().out == "job,name,count\ntrain,gemm,1\n"
    assert main(["sql", query, "--data-dir", str(tmp_path), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == [{"job": "train", "name": "gemm", "count": 1}]
    out = tmp_path / "r.parquet"
    assert main(["sql", query, "--data-dir", str(tmp_path), "--format", "parquet",
                 "-o", str(out)]) == 0  # fmt: skip
    assert pq.read_table(out).to_pylist() == [{"job": "train", "name": "gemm", "count": 1}]
    capsys.readouterr()
    assert main(["sql", "SELEC nonsense", "--data-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("tfprof-collector: SQL: Parser Error: syntax error") and err.count("\n") == 1
    )
    assert main(["sql", "SELECT 1", "--data-dir", str(tmp_path / "nope")]) == 2
    assert "no such data dir or lake" in capsys.readouterr().err
    assert main(["sql", "SELECT 1", "--data-dir", str(tmp_path), "--format", "parquet"]) == 2


def test_compact_command_reports_and_refuses_a_served_data_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_stream(tmp_path, [first_batch()])
    assert main(["compact", "--data-dir", str(tmp_path)]) == 0
    assert f"compacted 1 batches ({KINDS} records)" in capsys.readouterr().err
    with Store(tmp_path).serving():
        assert main(["compact", "--data-dir", str(tmp_path)]) == 1
    assert "another tfprof-collector serve" in capsys.readouterr().err


def test_views_gpu_busy_and_copy_summary(tmp_path: Path) -> None:
    b = pb.Batch(seq=1, string_base=1, strings=["k"])
    r = b.records
    # Kernels on device 0: [0,10) and [5,20) overlap, [30,40) apart; two copies HtoD of
    # 100 bytes in 10 ns each, one DtoH: busy (kernels, copies, memsets) 70 ns of 110.
    rows = [(1, 0, 10, 0, 0), (1, 5, 15, 0, 0), (1, 30, 10, 0, 0),
            (2, 50, 10, 100, 1), (2, 70, 10, 100, 1), (2, 90, 20, 50, 2)]  # fmt: skip
    for kind, start, duration, nbytes, copy_kind in rows:
        r.kind.append(pb.RecordKind.ValueType(kind))
        r.start_ns.append(start)
        r.duration_ns.append(duration)
        r.bytes.append(nbytes)
        r.copy_kind.append(copy_kind)
        r.name.append(1 if kind == 1 else 0)
    write_stream(tmp_path, [b])
    engine = Engine([str(tmp_path)])
    busy = run_query(engine, "SELECT gpu, busy_periods, busy_ns, busy_fraction FROM gpu_busy")
    assert busy.to_pylist() == [
        {"gpu": "GPU-0", "busy_periods": 5, "busy_ns": 70, "busy_fraction": 70 / 110}
    ]
    copies = run_query(engine, "SELECT direction, count, total_bytes, gb_per_s FROM "
                       "copy_summary ORDER BY direction").to_pylist()  # fmt: skip
    assert copies == [
        {"direction": "DtoH", "count": 1, "total_bytes": 50, "gb_per_s": 2.5},
        {"direction": "HtoD", "count": 2, "total_bytes": 200, "gb_per_s": 10.0},
    ]


def test_the_docs_document_every_column() -> None:
    # The lake reference is generated from the schema (scripts/gen_reference.py).
    docs = (Path(__file__).resolve().parents[2] / "docs/reference/lake.md").read_text()
    for table in TABLES.values():
        block = docs.split(f"\n## `{table.name}`\n")[1].split("\n## ")[0]
        for column in table.columns:
            assert f"| `{column.name}` |" in block, (table.name, column.name)


def test_compacting_an_idle_run_does_not_make_it_look_written(tmp_path: Path) -> None:
    import os

    write_stream(tmp_path, [first_batch()])
    old = 1_000_000_000.0
    for p in (tmp_path / "jobs").rglob("*"):
        os.utime(p, (old, old))
    compact(tmp_path)
    assert (tmp_path / "jobs/train/r1/s1/lake.json").exists()
    (run,) = Store(tmp_path).list_jobs()
    assert run.last_write == old  # retention still sees it idle


def test_a_segment_written_before_a_column_existed_reads_it_as_zero(tmp_path: Path) -> None:
    """Segments of an earlier release may lack a column or type one otherwise: the reader
    (not DuckDB's) gives the lake's types, and 0 for what was never written."""
    from tfprof.collector.lake.reader import open_jobs
    from tfprof.collector.read.lake_catalog import catalog
    from tfprof.collector.read.pulled_chunks import stream
    from tfprof.collector.timeline.prepare import TimeWindow

    data = tmp_path / "data"
    write_stream(data, [first_batch()])
    compact(data)

    def kernels() -> dict[str, list[int]]:
        """The kernels' columns as the read engine's chunks give them (what the export
        and the views read)."""
        cat = catalog(open_jobs([str(data)]).jobs, TimeWindow())
        _, chunks = stream(cat, ["kernels"], ["start_ns", "block_x", "grid_x"])
        found: dict[str, list[int]] = {"start_ns": [], "block_x": [], "grid_x": []}
        for chunk in chunks:
            for c, values in found.items():
                values += chunk[c].tolist()
        assert found["start_ns"]
        return found

    before = kernels()
    assert set(before["block_x"]) == {256}
    (segment,) = list_parquet(lake_of(data), "kernels")
    old = pq.read_table(segment.path).drop_columns(["block_x"])
    old = old.set_column(old.schema.get_field_index("grid_x"), "grid_x",
                         old.column("grid_x").cast("int64"))  # fmt: skip
    pq.write_table(old, segment.path)
    schema = TABLES["kernels"].schema
    read = read_parquet(lake_of(data), segment.path, schema, ["grid_x", "block_x"])
    assert read.schema == pa.schema([schema.field("grid_x"), schema.field("block_x")])
    assert read.column("block_x").to_pylist() == [0] * len(before["block_x"])
    after = kernels()
    assert after == {**before, "block_x": [0] * len(before["block_x"])}


def _read_steps(data_dir: Path) -> list[tuple[int, int, int]]:
    """(step number, start, end) of the STEP records the read engine's ``{st}`` sees."""
    import duckdb

    from tfprof.collector.lake.reader import open_jobs
    from tfprof.collector.read.clipped_sql import Relations
    from tfprof.collector.read.lake_catalog import catalog
    from tfprof.collector.timeline.prepare import TimeWindow

    cat = catalog(open_jobs([str(data_dir)]).jobs, TimeWindow())
    con = duckdb.connect()
    relations = Relations(con, cat)
    rows = con.sql(f"SELECT external_id, s, e FROM ({relations.text('st')}) ORDER BY s")
    return [(int(n), int(s), int(e)) for n, s, e in rows.fetchall()]


def test_step_records_read_the_same_from_the_lake_as_from_the_log(tmp_path: Path) -> None:
    """The hook's STEP records are a record table like the others: once compacted into
    the lake (where `serve` puts a finished stream at once) the steps view, `diff` and
    capture by steps still read them (they fell back to kernel periodicity)."""
    d = tmp_path / "d"
    write_stream(d, [first_batch(), records_batch(2, 50_000, n=3 * KINDS)])
    logs = _read_steps(d)
    assert len(logs) == 4  # one record of every kind per KINDS records: 1 + 3 STEP
    compact(d)
    assert list_parquet(lake_of(d), "steps")  # in the lake now, no longer in the log
    assert _read_steps(d) == logs
