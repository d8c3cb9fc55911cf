"""The data dir as issue 23 wants it: files for their owners (and a group) only, streams
that stored nothing swept away, a range that kills compaction quarantined rather than
retried into a crash loop, and a batch compacted a chunk at a time."""

from __future__ import annotations

import json
import logging
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.unit.lake_streams import KINDS, first_batch, hello, records_batch, write_stream
from tfprof.collector.lake import publish
from tfprof.collector.lake.location import lake_of
from tfprof.collector.lake.publish import compact_stream
from tfprof.collector.lake.segments import read_watermark
from tfprof.collector.store import Store
from tfprof.collector.store.sweep import sweep_empty
from tfprof.proto import collector_pb2 as pb


@pytest.fixture
def open_umask() -> Iterator[None]:
    """A umask that leaves everything world-readable: the modes must not depend on it."""
    before = os.umask(0)
    yield
    os.umask(before)


def modes(root: Path) -> tuple[set[str], set[str]]:
    dirs, files = set(), set()
    for dirpath, dirnames, filenames in os.walk(root):
        dirs |= {stat.filemode(os.lstat(os.path.join(dirpath, d)).st_mode) for d in dirnames}
        files |= {stat.filemode(os.lstat(os.path.join(dirpath, f)).st_mode) for f in filenames}
    return dirs, files


@pytest.mark.usefixtures("open_umask")
def test_a_streams_files_are_for_owner_and_group_only(tmp_path: Path) -> None:
    write_stream(tmp_path / "data", [first_batch()])
    dirs, files = modes(tmp_path / "data" / "jobs")
    assert dirs == {"drwxr-x---"}
    assert files == {"-rw-r-----"}
    assert stat.S_IMODE(os.stat(tmp_path / "data").st_mode) == 0o750


def test_a_data_group_is_inherited_by_everything_made_below(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    os.chmod(data, 0o2750)  # what serve --data-group leaves
    write_stream(data, [first_batch()])
    for dirpath, dirnames, _ in os.walk(data / "jobs"):
        for d in dirnames:
            assert os.stat(os.path.join(dirpath, d)).st_mode & stat.S_ISGID


def test_streams_that_stored_nothing_are_swept_after_the_grace(tmp_path: Path) -> None:
    store = Store(tmp_path / "data")
    for name in ("empty1", "empty2"):
        store.open_stream(hello(name, job="litter")).close()
    said_bye = store.open_stream(hello("bye", job="litter"))
    said_bye.finish(pb.Goodbye())  # nothing sent, nothing dropped
    said_bye.close()
    lost = store.open_stream(hello("lost", job="kept"))
    lost.finish(pb.Goodbye(records_sent=5, dropped_relay=5))  # sent 5, all lost: kept
    lost.close()
    write_stream(tmp_path / "data", [first_batch()], stream_id="full", job="kept")
    held = store.open_stream(hello("held", job="kept"))  # a live call holds it
    assert sweep_empty(store, grace_s=3600) == []  # all younger than the grace
    removed = sweep_empty(store, grace_s=0, now=time.time() + 1)
    assert sorted(p.name for p in removed) == ["bye", "empty1", "empty2"]
    assert not (store.jobs_dir / "litter").exists()  # its run and job folders too
    assert sorted(p.name for p in (store.jobs_dir / "kept" / "r1").iterdir()) == [
        "full", "held", "lost",
    ]  # fmt: skip
    held.close()


def test_a_range_whose_compaction_never_finishes_is_quarantined(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "data"
    stream_dir = write_stream(data, [first_batch(), records_batch(2, 20_000)])
    lake = lake_of(data)
    # What two compactions killed in the middle (the OOM killer) leave behind.
    (stream_dir / "lake.json").write_text(
        json.dumps({"lake": lake.url, "collector": "c", "attempt_after": 0, "attempts": 2})
    )
    with caplog.at_level(logging.ERROR, logger="tfprof.collector.lake"):
        done = compact_stream(stream_dir, lake, "c")
    (line,) = [r.getMessage() for r in caplog.records if "quarantined" in r.getMessage()]
    assert "batches 1-1 quarantined" in line and "never finished" in line
    # batch 2 (one record of each kind) published, batch 1 left out
    assert (done.batches, done.records) == (1, KINDS)
    mark = read_watermark(stream_dir)
    assert mark is not None and mark.last_seq == 2 and mark.attempts == 0
    assert [(q["first"], q["last"]) for q in mark.quarantined] == [(1, 1)]


def test_a_big_batch_is_compacted_a_chunk_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(publish, "CHUNK_ROWS", 1000)
    data = tmp_path / "data"
    stream_dir = write_stream(data, [records_batch(1, 10_000, n=KINDS * 900, strings=["k"])])
    done = compact_stream(stream_dir, lake_of(data), "c")
    assert done.records == KINDS * 900
    kernels = list((data / "lake" / "kernels").rglob("*.parquet"))
    (segment,) = kernels
    meta = pq.ParquetFile(segment).metadata
    assert meta.num_rows == 900 and meta.num_row_groups >= 6  # one per chunk of 1,000 rows
    assert not list((data / "lake").rglob(".*.tmp"))
