"""The spool on a full disk and with damaged files: every record is stored once or
counted as dropped, and nothing undelivered is deleted (agent/relay/spool.py, delivery.py,
flush.py), against a real collector and a real full tmpfs."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.tmpfs import small_tmpfs
from tests.unit.client_batches import UNREACHABLE, batch, hello
from tfprof.agent.relay.collector_client import CollectorClient
from tfprof.agent.relay.delivery import StreamDelivery
from tfprof.agent.relay.flush import flush_spool
from tfprof.agent.relay.spool import Spool
from tfprof.agent.relay.spool_reader import claim
from tfprof.collector.service.server import CollectorServer
from tfprof.core import batchlog
from tfprof.proto import collector_pb2 as pb

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 64 KiB tmpfs (we run as root here); skipped where mounting is refused."""
    with small_tmpfs(tmp_path / "small", "64k") as mnt:
        yield mnt


def stored(server: CollectorServer) -> tuple[int, int]:
    """(records stored, records the store counts as dropped) of job train."""
    (run,) = server.store.load_jobs(["train"])
    return run.num_records, run.dropped.total


def spill(spool: Spool, batches: int, per_batch: int = 50) -> StreamDelivery:
    """A stream whose collector is down: everything goes to the spool, then the job ends."""
    down = CollectorClient(UNREACHABLE)
    delivery = StreamDelivery(down, hello(), spool, memory_bytes=1)
    for i in range(batches):
        delivery.send(batch(per_batch, i * per_batch), per_batch)
    delivery.finish(pb.Goodbye(records_sent=batches * per_batch), timeout=5)
    down.close()
    return delivery


def test_a_full_disk_counts_what_it_cannot_keep_and_delivers_the_rest(
    small_disk: Path, tmp_path: Path
) -> None:
    sent = 400 * 50  # about 4x what 64 KiB holds
    delivery = spill(Spool(small_disk / "spool", 1 << 30), 400)
    assert delivery.dropped > 0 and delivery.spooled_records > 0
    assert delivery.spooled_records + delivery.dropped == sent
    # The spool reads back whole: what it says it holds, and a goodbye with the count.
    (directory,) = Spool(small_disk / "spool", 1 << 30).pending_streams()
    stream = claim(directory)
    assert stream is not None and stream.problems == []
    assert stream.goodbye is not None and stream.goodbye.dropped_relay == delivery.dropped
    assert sum(len(pb.AgentMessage.FromString(b).batch.records.kind) for b in stream.batches) == (
        delivery.spooled_records
    )
    stream.close()
    server = CollectorServer("127.0.0.1:0", str(tmp_path / "data")).start()
    try:
        result = flush_spool(
            Spool(small_disk / "spool", 1 << 30), CollectorClient, target=server.address
        )
        assert result.delivered_records == delivery.spooled_records and result.left == []
        assert stored(server) == (delivery.spooled_records, delivery.dropped)  # sent = both
    finally:
        server.stop(grace=0)
    assert not any((small_disk / "spool").rglob("batches.log"))  # delivered, then removed


def test_a_write_the_disk_refuses_leaves_no_partial_entry(small_disk: Path) -> None:
    spool = Spool(small_disk / "spool", 1 << 30)
    f = spool.open_stream(hello(), UNREACHABLE)
    data = [batch(50, i).SerializeToString() for i in range(400)]
    offsets = [f.append(d) for d in data]
    f.close()
    kept = [o for o in offsets if o is not None]
    assert None in offsets and kept
    log = spool.stream_dir(hello()) / "batches.log"
    scan = batchlog.scan_file(log)
    assert scan.damage == [] and scan.end == log.stat().st_size
    assert len(list(batchlog.read(log))) == len(kept)


def test_flush_keeps_a_folder_it_could_not_read_whole(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool", 1 << 30)
    delivery = spill(spool, 4)
    assert delivery.spooled_records == 200
    (directory,) = spool.pending_streams()
    log = directory / "batches.log"
    data = bytearray(log.read_bytes())
    data[len(batchlog.MAGIC) + batchlog.HEADER.size + 3] ^= 0xFF  # the first batch's payload
    log.write_bytes(bytes(data))
    (directory / "goodbye.pb").write_bytes(b"\x08\xff")  # torn mid-varint
    server = CollectorServer("127.0.0.1:0", str(tmp_path / "data")).start()
    try:
        result = flush_spool(spool, CollectorClient, target=server.address)
        assert result.delivered_records == 150  # the three readable batches
        assert stored(server) == (150, 0)
        (left,) = result.left
        assert "checksum mismatch" in left and "goodbye.pb unreadable" in left
    finally:
        server.stop(grace=0)
    assert log.exists()  # kept for a person to look at


def test_other_streams_are_delivered_past_an_unreadable_one(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool", 1 << 30)
    spill(spool, 2)
    bad = spool.root / str(os.geteuid()) / "train" / "run1" / "zz"
    bad.mkdir()
    (bad / "hello.pb").write_bytes(b"\x0a\xff")  # torn hello
    server = CollectorServer("127.0.0.1:0", str(tmp_path / "data")).start()
    try:
        result = flush_spool(spool, CollectorClient, target=server.address)
        assert result.delivered_records == 100
    finally:
        server.stop(grace=0)
    assert (bad / "hello.pb").exists()


def test_a_tmp_log_left_by_an_older_release_is_delivered(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool", 1 << 30)
    f = spool.open_stream(hello(), UNREACHABLE)
    f.close()
    directory = spool.stream_dir(hello())
    old = b""
    for seq in (1, 2):
        message = batch(10, seq * 10)
        message.batch.seq = seq
        payload = message.SerializeToString()
        old += batchlog.LENGTH.pack(len(payload)) + payload
    (directory / "batches.log.tmp").write_bytes(old)
    server = CollectorServer("127.0.0.1:0", str(tmp_path / "data")).start()
    try:
        result = flush_spool(spool, CollectorClient, target=server.address)
        assert result.delivered_records == 20 and stored(server)[0] == 20
    finally:
        server.stop(grace=0)


def test_the_spools_goodbye_is_replaced_atomically(small_disk: Path) -> None:
    spool = Spool(small_disk / "spool", 1 << 30)
    f = spool.open_stream(hello(), UNREACHABLE)
    f.write_goodbye(pb.Goodbye(records_sent=1))
    filler = small_disk / "filler"
    with open(filler, "wb", buffering=0) as out, pytest.raises(OSError):
        while True:
            out.write(b"\0" * 4096)
    with pytest.raises(OSError):
        f.write_goodbye(pb.Goodbye(records_sent=2, dropped_relay=10**15))
    f.close()
    directory = spool.stream_dir(hello())
    assert pb.Goodbye.FromString((directory / "goodbye.pb").read_bytes()).records_sent == 1
    assert not (directory / "goodbye.pb.tmp").exists()
