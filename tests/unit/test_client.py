"""agent/relay/collector_client.py and the spool against a real collector, a restarted one,
and none."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from tests.unit.client_batches import UNREACHABLE, Failures, batch, hello
from tfprof.agent.relay.collector_client import CollectorClient
from tfprof.agent.relay.delivery import StreamDelivery
from tfprof.agent.relay.flush import flush_spool
from tfprof.agent.relay.spool import Spool
from tfprof.collector.service.server import CollectorServer
from tfprof.proto import collector_pb2 as pb

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def client(collector: CollectorServer) -> Iterator[CollectorClient]:
    c = CollectorClient(collector.address)
    try:
        yield c
    finally:
        c.close()


def stored_starts(server: CollectorServer, job: str = "train") -> list[int]:
    (run,) = server.store.load_jobs([job])
    return sorted(v for s in run.streams for v in s.records["start_ns"].tolist())


def send_all(delivery: StreamDelivery, sizes: list[int], start: int = 0) -> int:
    for n in sizes:
        assert delivery.send(batch(n, start), n)
        start += n
    return start


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


def test_delivery_in_order_with_acks(client: CollectorClient, collector: CollectorServer) -> None:
    failures = Failures()
    delivery = StreamDelivery(client, hello(), on_failure=failures)
    total = send_all(delivery, [3, 1, 4, 1, 5])
    assert delivery.finish(pb.Goodbye(records_sent=total), timeout=20)
    assert delivery.records_acked == total
    assert delivery.acked_seq == 5
    assert delivery.dropped == 0
    assert failures.reasons == []
    assert stored_starts(collector) == list(range(total))
    (run,) = collector.store.load_jobs(["train"])
    assert run.streams[0].finished


def test_a_rejected_stream_reports_why_once_and_spools(
    client: CollectorClient, tmp_path: Path
) -> None:
    failures = Failures()
    spool = Spool(tmp_path / "spool", 1 << 30)
    delivery = StreamDelivery(client, hello(job="bad..job"), spool, failures)
    bad = StreamDelivery(client, hello(job="-bad"), spool, failures)
    assert failures.event.wait(20)
    delivery.send(batch(2), 2)
    bad.send(batch(2), 2)
    assert not bad.finish(pb.Goodbye(), timeout=20)
    assert delivery.finish(pb.Goodbye(), timeout=20)  # a valid name after all
    assert len(failures.reasons) == 1
    assert failures.reasons[0].startswith("INVALID_ARGUMENT: ")
    assert "invalid job name" in failures.reasons[0]
    assert (spool.root / str(os.geteuid()) / "-bad" / "run1" / "s1" / "batches.log").exists()


def test_unreachable_collector_spools_and_flush_delivers_once(
    collector: CollectorServer, tmp_path: Path
) -> None:
    spool = Spool(tmp_path / "spool", 1 << 30)
    down = CollectorClient(UNREACHABLE)
    failures = Failures()
    # A tiny memory budget: everything beyond the first batch spills to disk, in order.
    delivery = StreamDelivery(down, hello(), spool, failures, memory_bytes=1)
    total = send_all(delivery, [10, 20, 30, 40])
    assert failures.event.wait(15)
    assert not delivery.finish(pb.Goodbye(records_sent=total), timeout=30)
    down.close()
    assert failures.reasons[0].startswith("UNAVAILABLE")
    stream_dir = spool.root / str(os.geteuid()) / "train" / "run1" / "s1"
    assert (stream_dir / "goodbye.pb").exists()
    assert (stream_dir / "target").read_text() == UNREACHABLE

    result = flush_spool(spool, CollectorClient, target=collector.address, timeout=30)
    assert (result.delivered_streams, result.delivered_records) == (1, total)
    assert result.left == []
    assert not stream_dir.exists()
    assert stored_starts(collector) == list(range(total))
    # Flushing again delivers nothing more, and nothing is duplicated.
    assert flush_spool(spool, CollectorClient, target=collector.address).delivered_streams == 0
    assert stored_starts(collector) == list(range(total))


def test_a_full_spool_drops_and_counts(tmp_path: Path) -> None:
    one = len(batch(20).SerializeToString()) + 8  # a batch, its seq and its length prefix
    # The spool's limit counts its hello.pb and target files too.
    spool = Spool(tmp_path / "spool", 2 * one + len(hello().SerializeToString()))
    down = CollectorClient(UNREACHABLE)
    delivery = StreamDelivery(down, hello(), spool, memory_bytes=1)
    accepted = [delivery.send(batch(20, i * 20), 20) for i in range(5)]
    goodbye = pb.Goodbye(records_sent=100)
    delivery.finish(goodbye, timeout=10)
    down.close()
    assert accepted[0] and not all(accepted)
    assert delivery.dropped == 20 * accepted.count(False)
    assert goodbye.dropped_relay == delivery.dropped  # counted where the store sees it


def test_a_collector_restart_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = CollectorServer("127.0.0.1:0", str(data)).start()
    address = first.address
    client = CollectorClient(address)
    delivery = StreamDelivery(client, hello(), Spool(tmp_path / "spool", 1 << 30))
    start = send_all(delivery, [100] * 5)
    first.stop(grace=0)
    start = send_all(delivery, [100] * 5, start)  # while it is down
    second = CollectorServer(address, str(data)).start()
    try:
        start = send_all(delivery, [100] * 5, start)
        assert delivery.finish(pb.Goodbye(records_sent=start), timeout=40)
        assert stored_starts(second) == list(range(start))
    finally:
        client.close()
        second.stop(grace=0)


class HangingCollector:
    """A real gRPC server on the collector's Stream method that takes a call and never
    answers: a collector stuck before a restart."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self._release = threading.Event()
        handler = grpc.stream_stream_rpc_method_handler(self._stream)
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        service = pb.DESCRIPTOR.services_by_name["Collector"].full_name
        generic = grpc.method_handlers_generic_handler(service, {"Stream": handler})
        self.server.add_generic_rpc_handlers((generic,))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def _stream(self, requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
        next(requests)  # the hello
        self.entered.set()
        self._release.wait(30)
        return iter(())

    def stop(self) -> None:
        self._release.set()
        self.server.stop(grace=0)


def test_a_call_from_before_the_end_failing_after_it_does_not_give_up(tmp_path: Path) -> None:
    """The job ends while a call begun earlier hangs on a collector about to restart; that
    call failing is no sign the collector is down: a fresh call delivers everything."""
    stuck = HangingCollector()
    address = f"127.0.0.1:{stuck.port}"
    client = CollectorClient(address)
    delivery = StreamDelivery(client, hello(), Spool(tmp_path / "spool", 1 << 30))
    second: CollectorServer | None = None
    try:
        total = send_all(delivery, [100] * 3)
        assert stuck.entered.wait(20)
        delivered: list[bool] = []
        ending = threading.Thread(
            target=lambda: delivered.append(
                delivery.finish(pb.Goodbye(records_sent=total), timeout=40)
            )
        )
        ending.start()
        while not delivery._finishing:  # the job has ended before the old call fails
            time.sleep(0.01)
        stuck.stop()
        second = CollectorServer(address, str(tmp_path / "data")).start()
        ending.join(50)
        assert delivered == [True]
        assert stored_starts(second) == list(range(total))
    finally:
        client.close()
        stuck.stop()
        if second is not None:
            second.stop(grace=0)


def stacks_batch(samples: int) -> pb.AgentMessage:
    message = pb.AgentMessage()
    stacks = message.batch.stacks
    stacks.time_ns.extend(range(1, samples + 1))
    stacks.stack.extend([1] * samples)
    stacks.kind.extend([pb.StackKind.STACK_SAMPLE] * samples)
    return message


def test_lost_stack_samples_are_counted_apart_from_records(tmp_path: Path) -> None:
    one = len(batch(20).SerializeToString()) + 8
    # Room for the stream's hello, the records batch and a stacks batch or so: the rest
    # of the stacks batches find the spool full.
    spool = Spool(tmp_path / "spool", 4 * one)
    down = CollectorClient(UNREACHABLE)
    delivery = StreamDelivery(down, hello(), spool, memory_bytes=1)
    assert delivery.send(batch(20), 20)
    sent = [delivery.send(stacks_batch(30), 0, samples=30) for _ in range(6)]
    goodbye = pb.Goodbye(records_sent=20, dropped_stack_samples=5)  # 5: the hook's own
    delivery.finish(goodbye, timeout=10)
    down.close()
    assert not all(sent)
    lost = 30 * sent.count(False)
    assert delivery.dropped == 0 and goodbye.dropped_relay == 0  # records: none lost
    assert delivery.dropped_samples >= lost
    assert goodbye.dropped_stack_samples == 5 + delivery.dropped_samples
