"""What a stream's log says beyond its records survives compaction (lake/logstate.py):
queue drops counted before a goodbye, damaged entries compaction skipped (stream,
offset, bytes, reason, records lost) and an unreadable goodbye read back from the lake
alone exactly as reading the log reports them, in ``jobs``, ``summary`` and ``sql``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.store_batches import batch, hello
from tfprof.collector.cli import main
from tfprof.collector.jobdata import StreamData
from tfprof.collector.lake.convert import StreamCursor
from tfprof.collector.lake.location import lake_of
from tfprof.collector.lake.publish import compact_data_dir, compact_stream
from tfprof.collector.lake.query import Engine, run_query
from tfprof.collector.lake.reader import open_jobs
from tfprof.collector.lake.segments import collector_id
from tfprof.collector.store import Store
from tfprof.collector.store.loader import load_stream
from tfprof.core import batchlog
from tfprof.proto import collector_pb2 as pb

PER_BATCH = 3


def write(data_dir: Path, batches: int = 10, finish: bool = True, dropped: int = 0) -> Path:
    """A stream of ``batches`` batches of ``PER_BATCH`` kernels; batch i carries the
    cumulative queue-drop count ``i * dropped``. Returns its directory."""
    store = Store(data_dir, fsync=False)
    w = store.open_stream(hello())
    for i in range(1, batches + 1):
        starts = [1_000 * i + k for k in range(PER_BATCH)]
        w.append(batch(i, starts, strings=["gemm"] if i == 1 else None, dropped=i * dropped))
    if finish:
        w.finish(pb.Goodbye(records_sent=batches * PER_BATCH, dropped_tracer=1))
    w.close()
    return w.directory


def flip(log: Path, entry: int) -> batchlog.Damage:
    """Damage the ``entry``-th entry's payload; the damage a scan reports for it."""
    offsets = [offset for offset, _ in batchlog.entries(log.read_bytes())]
    data = bytearray(log.read_bytes())
    data[offsets[entry] + batchlog.HEADER.size + 2] ^= 0xFF
    log.write_bytes(bytes(data))
    (damage,) = batchlog.scan_file(log).damage
    assert damage.offset == offsets[entry]
    return damage


def compact(data_dir: Path) -> None:
    _done, failed = compact_data_dir(data_dir, lake_of(data_dir), collector_id(data_dir))
    assert not failed


def lake_stream(source: Path) -> StreamData:
    ((stream,),) = [job.streams for job in open_jobs([str(source)]).jobs]
    return stream


def from_log(directory: Path) -> StreamData:
    stream = load_stream(directory)
    assert stream is not None
    return stream


def same_notes(ours: StreamData, theirs: StreamData) -> None:
    assert ours.skipped == theirs.skipped
    assert ours.lost_records == theirs.lost_records
    assert ours.dropped == theirs.dropped
    assert ours.finished == theirs.finished
    assert ours.num_records == 0  # read inside loaded(): the counts come from the rows


def sql(source: Path, query: str) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = run_query(Engine([str(source)]), query).to_pylist()
    return rows


def test_damage_compaction_skipped_is_reported_from_the_lake(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = write(tmp_path)
    damage = flip(directory / "batches.log", 3)
    compact(tmp_path)
    lake = tmp_path / "lake"
    truth = from_log(directory)
    assert truth.lost_records == PER_BATCH and truth.skipped == [f"batches.log: {damage}"]
    for source in (lake, tmp_path):  # the lake alone, and the data dir (fully compacted)
        same_notes(lake_stream(source), truth)
    assert sql(lake, "SELECT stream_id, lost_records, damage FROM log_state") == [
        {"stream_id": "s1", "lost_records": PER_BATCH,
         "damage": [{"offset": damage.offset, "bytes": damage.nbytes,
                     "reason": "checksum mismatch"}]},
    ]  # fmt: skip
    # jobs: the same notes under the table as listing the logs gives.
    assert main(["jobs", "--data-dir", str(tmp_path)]) == 0
    from_logs = [line for line in capsys.readouterr().out.splitlines() if "skipped" in line]
    assert main(["jobs", "--data-dir", str(lake)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert from_logs and [line for line in out if "skipped" in line] == from_logs
    assert f"train run1: records lost in skipped parts: {PER_BATCH}" in out
    # summary: the damage note over the lake, as over the logs.
    for source in (tmp_path, lake):
        assert main(["summary", "--data-dir", str(source), "--view", "kernels"]) == 0
        out_text = capsys.readouterr().out
        assert f"job train: {PER_BATCH} records could not be read from the store" in out_text
        assert f"0: batches.log: {damage}" in out_text


def test_a_running_streams_queue_drops_survive_compaction(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = write(tmp_path, batches=4, finish=False, dropped=5)
    compact(tmp_path)
    lake = tmp_path / "lake"
    truth = from_log(directory)
    assert truth.dropped.queue == 20 and not truth.finished
    for source in (lake, tmp_path):
        same_notes(lake_stream(source), truth)
    assert sql(lake, "SELECT dropped FROM runs") == [{"dropped": 20}]
    assert main(["jobs", "--data-dir", str(lake)]) == 0
    (row,) = [line.split() for line in capsys.readouterr().out.splitlines() if "run1" in line]
    assert row[:8] == ["train", "run1", "incomplete", "1", "0", "12", "12", "20"]
    # Its goodbye's count then wins (the larger), with the tracer's drops beside it.
    store = Store(tmp_path, fsync=False)
    w = store.open_stream(hello())
    w.finish(pb.Goodbye(records_sent=12, dropped_queue=30, dropped_tracer=1))
    w.close()
    compact(tmp_path)
    truth = from_log(directory)
    for source in (lake, tmp_path):
        same_notes(lake_stream(source), truth)
    assert sql(lake, "SELECT dropped FROM runs") == [{"dropped": 31}]


def test_the_background_compactors_cursor_notes_damage_between_passes(tmp_path: Path) -> None:
    store = Store(tmp_path, fsync=False)
    w = store.open_stream(hello())
    w.append(batch(1, [10, 20], strings=["gemm"]))
    lake, collector = lake_of(tmp_path), collector_id(tmp_path)
    cursors: dict[Path, StreamCursor] = {}
    compact_stream(w.directory, lake, collector, cursors)
    for seq in (2, 3):
        w.append(batch(seq, [seq * 100]))
    damage = flip(w.directory / "batches.log", 1)  # batch 2, after the first pass
    w.append(batch(4, [400], dropped=7))
    compact_stream(w.directory, lake, collector, cursors)  # reads on from where it was
    assert cursors[w.directory].damage == [damage]
    truth = from_log(w.directory)
    w.close()
    assert truth.skipped == [f"batches.log: {damage}"] and truth.dropped.queue == 7
    same_notes(lake_stream(tmp_path / "lake"), truth)


def test_a_dead_streams_torn_tail_is_noted_until_the_stream_goes_on(tmp_path: Path) -> None:
    directory = write(tmp_path, batches=2, finish=False)
    log = directory / "batches.log"
    whole = batchlog.encode(batch(3, [3_000]).SerializeToString())
    log.write_bytes(log.read_bytes() + whole[: len(whole) // 2])  # a crash mid-append
    compact(tmp_path)
    truth = from_log(directory)
    assert [s.endswith("(torn tail)") for s in truth.skipped] == [True]
    same_notes(lake_stream(tmp_path / "lake"), truth)
    # The agent comes back: the writer cuts the torn tail and appends; the note goes.
    store = Store(tmp_path, fsync=False)
    w = store.open_stream(hello())
    w.append(batch(3, [3_000]))
    w.close()
    compact(tmp_path)
    truth = from_log(directory)
    assert truth.skipped == []
    same_notes(lake_stream(tmp_path / "lake"), truth)
    assert sql(tmp_path / "lake", "SELECT damage FROM log_state") == [{"damage": []}]


def test_an_unreadable_goodbye_reads_as_from_the_log(tmp_path: Path) -> None:
    directory = write(tmp_path, batches=2)
    (directory / "goodbye.pb").write_bytes(b"\xff\xff\xff")
    compact(tmp_path)
    truth = from_log(directory)
    assert truth.skipped == ["goodbye.pb unreadable"] and not truth.finished
    for source in (tmp_path / "lake", tmp_path):
        same_notes(lake_stream(source), truth)


def test_a_stream_compacted_by_the_previous_release_gets_its_row(tmp_path: Path) -> None:
    directory = write(tmp_path, batches=3, finish=False, dropped=2)
    compact(tmp_path)
    lake = tmp_path / "lake"
    for path in lake.glob("log_state/**/*.parquet"):
        path.unlink()  # as the previous release left the lake
    mark = json.loads((directory / "lake.json").read_text())
    del mark["log_state"]
    (directory / "lake.json").write_text(json.dumps(mark))
    assert lake_stream(tmp_path).dropped.queue == 6  # a data dir reads it from the log
    assert lake_stream(lake).dropped.queue == 0
    compact(tmp_path)
    assert lake_stream(lake).dropped.queue == 6
