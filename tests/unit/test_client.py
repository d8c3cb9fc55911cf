"""agent/client.py against a real collector, and against nothing at all."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from tfprof.agent.client import CollectorClient, StreamSender
from tfprof.agent.frames import COLUMNS, RecordKind
from tfprof.collector.server import CollectorServer
from tfprof.proto import collector_pb2 as pb

pytestmark = pytest.mark.timeout(30)
UNREACHABLE = "127.0.0.1:1"


def hello(job: str = "train") -> pb.Hello:
    return pb.Hello(protocol_version=1, job=job, run_id="run1", stream_id="s1", host="node-a",
                    pid=100, task="0")  # fmt: skip


def batch(n: int, start: int = 0) -> pb.Batch:
    b = pb.Batch()
    for col in COLUMNS:
        getattr(b.records, col).extend([0] * n)
    b.records.kind[:] = [RecordKind.KERNEL] * n
    b.records.start_ns[:] = range(start, start + n)
    return b


class Failures:
    """Collects on_failure calls; ``event`` is set by the first."""

    def __init__(self) -> None:
        self.reasons: list[str] = []
        self.event = threading.Event()

    def __call__(self, why: str) -> None:
        self.reasons.append(why)
        self.event.set()


@pytest.fixture
def client(collector: CollectorServer) -> Iterator[CollectorClient]:
    c = CollectorClient(collector.address)
    try:
        yield c
    finally:
        c.close()


def test_estimate_clock_on_the_same_host(client: CollectorClient) -> None:
    result = client.estimate_clock(samples=5, timeout=5.0)
    assert result is not None
    offset, rtt = result
    assert rtt >= 0
    # Same clock on both ends: NTP's bound puts the estimate within half a round trip.
    assert abs(offset) <= rtt // 2 + 1


def test_estimate_clock_without_a_collector_is_none() -> None:
    c = CollectorClient(UNREACHABLE)
    try:
        assert c.estimate_clock(samples=3, timeout=5.0) is None
    finally:
        c.close()


def test_stream_sender_delivers_and_counts_acks(
    client: CollectorClient, collector: CollectorServer
) -> None:
    failures = Failures()
    sender = client.open_stream(hello(), failures)
    sizes = [3, 1, 4, 1, 5]
    sent = []
    start = 0
    for n in sizes:
        b = batch(n, start)
        start += n
        assert sender.send(b, n)
        sent.append(b.seq)
    assert sent == [1, 2, 3, 4, 5]
    assert sender.finish(pb.Goodbye(records_sent=sum(sizes)), timeout=20)
    assert sender.records_acked == sum(sizes)
    assert sender.acked_seq == len(sizes)
    assert (sender.dropped, sender.failed) == (0, None)
    assert failures.reasons == []

    (job,) = collector.store.load_jobs(["train"])
    (s,) = job.streams
    assert s.records["start_ns"].tolist() == list(range(sum(sizes)))
    assert s.finished


def test_a_stream_the_collector_rejects_reports_why(client: CollectorClient) -> None:
    failures = Failures()
    sender = client.open_stream(hello(job="../bad"), failures)
    assert failures.event.wait(20)
    assert not sender.send(batch(2), 2)
    assert sender.dropped == 2
    assert not sender.finish(pb.Goodbye(), timeout=20)
    assert len(failures.reasons) == 1
    assert failures.reasons[0].startswith("INVALID_ARGUMENT: ")
    assert "invalid job name" in failures.reasons[0]


@pytest.mark.timeout(20)
def test_an_unreachable_collector_fails_once_and_drops() -> None:
    client = CollectorClient(UNREACHABLE)
    failures = Failures()
    try:
        sender = client.open_stream(hello(), failures)
        assert isinstance(sender, StreamSender)
        sender.send(batch(3), 3)  # in flight or dropped: either way counted below
        assert failures.event.wait(15), "no failure reported for an unreachable collector"
        assert not sender.send(batch(2), 2)
        assert sender.dropped == 5
        # Must return as soon as the failure is known, not wait out its own timeout.
        assert not sender.finish(pb.Goodbye(), timeout=60)
    finally:
        client.close()
    assert len(failures.reasons) == 1
    assert failures.reasons[0].startswith("UNAVAILABLE")
    assert sender.failed == failures.reasons[0]
    assert sender.records_acked == 0
