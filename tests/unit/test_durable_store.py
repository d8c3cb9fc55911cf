"""Damaged or poisoned data cost only what they hold: the batch-log checksum, torn small
files, overflowing clocks and counts (core/batchlog.py, collector/store/, validate.py)."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import pytest

from tests.unit.store_batches import batch, hello
from tfprof.collector.errors import InvalidArgument
from tfprof.collector.service.validate import check_batch, check_goodbye, check_hello
from tfprof.collector.store import Store
from tfprof.core import batchlog
from tfprof.proto import collector_pb2 as pb

POISON = 7_258_118_400_000_000_000  # each snapshot in bounds, their difference is not


def stored(tmp_path: Path, batches: int = 10, per_batch: int = 3) -> Path:
    """A finished stream of ``batches`` batches; its directory."""
    store = Store(tmp_path, fsync=False)
    w = store.open_stream(hello())
    for i in range(1, batches + 1):
        w.append(batch(i, [1_000 * i + k for k in range(per_batch)]))
    w.finish(pb.Goodbye(records_sent=batches * per_batch))
    w.close()
    return store.jobs_dir / "train" / "run1" / "s1"


def entry_offsets(log: Path) -> list[int]:
    return [offset for offset, _ in batchlog.entries(log.read_bytes())]


# -- the log format ------------------------------------------------------------------------


def test_a_flipped_byte_costs_one_entry_and_is_reported() -> None:
    data = bytearray(batchlog.MAGIC)
    for payload in (b"a" * 50, b"b" * 50, b"c" * 50):
        data += batchlog.encode(payload)
    second = len(batchlog.MAGIC) + batchlog.entry_size(50)
    data[second + batchlog.HEADER.size + 10] ^= 0xFF
    scan = batchlog.Scan(batchlog.V2, 0)
    assert [p[:1] for _, p in batchlog.entries(bytes(data), 0, scan)] == [b"a", b"c"]
    assert scan.damage == [batchlog.Damage(second, batchlog.entry_size(50), "checksum mismatch")]


def test_a_garbled_length_does_not_hide_the_entries_after_it() -> None:
    data = bytearray(batchlog.MAGIC)
    for i in range(20):
        data += batchlog.encode(bytes([i]) * 30)
    data[len(batchlog.MAGIC) + 4 : len(batchlog.MAGIC) + 8] = b"\xff\xff\xff\x7f"
    scan = batchlog.Scan(batchlog.V2, 0)
    assert len(list(batchlog.entries(bytes(data), 0, scan))) == 19
    assert [d.offset for d in scan.damage] == [len(batchlog.MAGIC)]


def test_a_torn_tail_is_reported_and_cut_before_appending(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_bytes(batchlog.MAGIC + batchlog.encode(b"x" * 10) + batchlog.encode(b"y" * 10)[:7])
    scan = batchlog.scan_file(path)
    assert [d.reason for d in scan.damage] == ["torn tail"]
    f, version = batchlog.open_for_append(path)
    batchlog.append(f, b"z", version)
    f.close()
    assert list(batchlog.read(path)) == [b"x" * 10, b"z"]


def test_logs_of_the_previous_release_are_read_and_appended_in_their_format(
    tmp_path: Path,
) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"".join(batchlog.LENGTH.pack(len(p)) + p for p in (b"one", b"two")))
    f, version = batchlog.open_for_append(path)
    assert version == batchlog.V1
    batchlog.append(f, b"three", version)
    f.close()
    assert list(batchlog.read(path)) == [b"one", b"two", b"three"]


def test_a_data_dir_of_the_previous_release_still_loads(tmp_path: Path) -> None:
    d = tmp_path / "jobs" / "train" / "run1" / "s1"
    d.mkdir(parents=True)
    (d / "hello.pb").write_bytes(hello().SerializeToString())
    old = [batch(i, [i * 10]).SerializeToString() for i in (1, 2)]
    (d / "batches.log").write_bytes(b"".join(batchlog.LENGTH.pack(len(p)) + p for p in old))
    store = Store(tmp_path, fsync=False)
    w = store.open_stream(hello())
    w.append(batch(3, [30]))
    w.close()
    (job,) = store.load_jobs()
    assert list(job.streams[0].records["start_ns"]) == [10, 20, 30]
    assert store.list_jobs()[0].records == 3


# -- readers: one bad stream or entry, never the whole data dir -----------------------------


def test_corrupt_entry_is_skipped_and_reported_with_records_lost(tmp_path: Path) -> None:
    d = stored(tmp_path)
    log = d / "batches.log"
    offsets = entry_offsets(log)
    data = bytearray(log.read_bytes())
    data[offsets[3] + 4] ^= 0x55  # the length prefix of the 4th batch
    log.write_bytes(bytes(data))
    store = Store(tmp_path)
    (info,) = store.list_jobs()
    assert info.records == 27 and info.lost_records == 3
    assert info.skipped and f"offset {offsets[3]:,}" in info.skipped[0]
    assert "s1" in info.skipped[0]
    (job,) = store.load_jobs()
    stream = job.streams[0]
    assert stream.num_records == 27 and stream.lost_records == 3
    assert stream.skipped == [f"batches.log: {d}" for d in batchlog.scan_file(log).damage]


def test_jobs_lists_what_was_skipped_and_why_a_run_is_incomplete(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tfprof.collector.cli import main

    d = stored(tmp_path)
    log = d / "batches.log"
    data = bytearray(log.read_bytes())
    data[entry_offsets(log)[0] + batchlog.HEADER.size] ^= 1
    log.write_bytes(bytes(data))
    (d / "goodbye.pb").unlink()
    assert main(["jobs", "--data-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "train run1: incomplete: agent lost: no goodbye from 1 stream(s)" in out
    assert "skipped s1: batches.log" in out and "checksum mismatch" in out
    assert "records lost in skipped parts: 3" in out


@pytest.mark.parametrize("view", ["kernels", "streams", "gpus"])
def test_summary_says_what_a_damaged_log_cost(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], view: str
) -> None:
    from tfprof.collector.cli import main

    d = stored(tmp_path)
    log = d / "batches.log"
    data = bytearray(log.read_bytes())
    data[entry_offsets(log)[2] + batchlog.HEADER.size] ^= 1  # the 3rd batch: 3 records
    log.write_bytes(bytes(data))
    assert main(["summary", "--data-dir", str(tmp_path), "--view", view]) == 0
    out = capsys.readouterr().out
    assert "job train: 3 records could not be read from the store" in out
    assert "checksum mismatch" in out


@pytest.mark.parametrize("name", ["hello.pb", "goodbye.pb"])
def test_a_torn_small_file_costs_only_its_stream(tmp_path: Path, name: str) -> None:
    stored(tmp_path / "a")
    good = Store(tmp_path / "a", fsync=False)
    bad_store = Store(tmp_path / "a", fsync=False)
    w = bad_store.open_stream(hello(stream_id="s2"))
    w.append(batch(1, [5]))
    w.finish(pb.Goodbye(records_sent=1))
    w.close()
    torn = good.jobs_dir / "train" / "run1" / "s2" / name
    torn.write_bytes(torn.read_bytes()[:3] + b"\xff\xff")
    (info,) = good.list_jobs()
    assert any(s.startswith("s2:") for s in info.skipped)
    assert (info.state, info.reason) == ("incomplete", "unreadable files")
    (job,) = good.load_jobs()
    assert sum(s.num_records for s in job.streams) == (30 if name == "hello.pb" else 31)


def test_a_poisoned_clock_leaves_out_one_stream_not_the_data_dir(tmp_path: Path) -> None:
    from tfprof.collector.cli import main

    stored(tmp_path)
    d = tmp_path / "jobs" / "other" / "run1" / "s9"
    d.mkdir(parents=True)
    poisoned = hello(job="other", stream_id="s9")
    poisoned.clock.realtime_ns, poisoned.clock.tracer_ns = POISON, -POISON
    (d / "hello.pb").write_bytes(poisoned.SerializeToString())
    (d / "batches.log").write_bytes(
        batchlog.MAGIC + batchlog.encode(batch(1, [5]).SerializeToString())
    )
    store = Store(tmp_path)
    jobs = store.load_jobs()
    assert [j.name for j in jobs] == ["other", "train"]
    assert jobs[0].streams == [] and "64 bits" in jobs[0].skipped[0]
    assert jobs[1].num_records == 30
    out = tmp_path / "trace.json"
    assert main(["export", "--data-dir", str(tmp_path), "-o", str(out)]) == 0
    meta = {j["name"]: j for j in json.loads(out.read_text())["otherData"]["jobs"]}
    assert "64 bits" in meta["other"]["skipped"][0]
    assert meta["train"]["skipped"] == []


def test_export_metadata_names_what_was_skipped(tmp_path: Path) -> None:
    from tfprof.collector.cli import main

    d = stored(tmp_path)
    log = d / "batches.log"
    data = bytearray(log.read_bytes())
    data[entry_offsets(log)[5] + batchlog.HEADER.size + 2] ^= 1
    log.write_bytes(bytes(data))
    out = tmp_path / "trace.json"
    assert main(["export", "--data-dir", str(tmp_path), "-o", str(out)]) == 0
    (job,) = json.loads(out.read_text())["otherData"]["jobs"]
    (task,) = job["tasks"]
    assert task["records_lost"] == 3 and "checksum mismatch" in task["skipped"][0]
    assert job["skipped"] == [f"{task['task']}: {task['skipped'][0]}"]


def test_an_absurd_dropped_count_leaves_out_its_stream(tmp_path: Path) -> None:
    d = stored(tmp_path)
    (d / "goodbye.pb").write_bytes(pb.Goodbye(dropped_relay=2**64 - 1).SerializeToString())
    (job,) = Store(tmp_path).load_jobs()
    assert job.streams == [] and "dropped relay count" in job.skipped[0]


# -- ingest: derived values are checked before anything is stored --------------------------


def test_a_hello_whose_clock_pair_overflows_is_refused() -> None:
    h = hello()
    h.clock.realtime_ns, h.clock.tracer_ns = POISON, -POISON
    with pytest.raises(InvalidArgument, match="out of range"):
        check_hello(h)
    h.clock.realtime_ns, h.clock.tracer_ns = 1_700_000_000 * 10**9, 5 * 10**9
    check_hello(h)  # a tracer clock that started at boot is fine


def test_shifted_times_must_stay_in_int64() -> None:
    b = batch(1, [POISON - 10**9])
    check_batch(b, 0)
    with pytest.raises(InvalidArgument, match="clock shift"):
        check_batch(b, POISON)


def test_counts_readers_add_up_must_fit() -> None:
    with pytest.raises(InvalidArgument):
        check_goodbye(pb.Goodbye(dropped_relay=2**64 - 1))
    with pytest.raises(InvalidArgument):
        check_goodbye(pb.Goodbye(dropped_queue=2**62, dropped_tracer=2**62, dropped_relay=2**62))
    check_goodbye(pb.Goodbye(records_sent=10, dropped_relay=3))
    with pytest.raises(InvalidArgument):
        check_batch(pb.Batch(seq=1, dropped=2**64 - 1))
    big = batch(1, [5])
    big.records.bytes[0] = 2**64 - 1
    with pytest.raises(InvalidArgument, match="bytes"):
        check_batch(big)


def test_crc_covers_the_length() -> None:
    entry = batchlog.encode(b"payload")
    _, length, crc = batchlog.HEADER.unpack_from(entry)
    assert crc == zlib.crc32(b"payload", zlib.crc32(batchlog.LENGTH.pack(length)))
