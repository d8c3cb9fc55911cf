"""Agent delivery against a collector at its stream limit, and one over its size limit:
busy means retry with backoff (nothing spooled), too large means give up at once."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.unit.client_batches import Failures, batch, hello
from tfprof.agent.relay.collector_client import CollectorClient
from tfprof.agent.relay.delivery import StreamDelivery
from tfprof.agent.relay.spool import Spool
from tfprof.collector.service.server import CollectorServer
from tfprof.proto import collector_pb2 as pb

pytestmark = pytest.mark.timeout(90)
PROCESSES = 10
BATCHES = 3
RECORDS = 5


def test_ten_streams_against_a_limit_of_four_all_deliver_without_spooling(
    tmp_path: Path,
) -> None:
    server = CollectorServer("127.0.0.1:0", str(tmp_path / "data"), max_streams=4).start()
    client = CollectorClient(server.address)
    spool = Spool(str(tmp_path / "spool"), 1 << 30)
    failures = Failures()
    try:
        deliveries = [
            StreamDelivery(client, hello(stream_id=f"s{i}"), spool, failures)
            for i in range(PROCESSES)
        ]
        for i, delivery in enumerate(deliveries):
            for b in range(BATCHES):
                delivery.send(batch(RECORDS, start=(i * BATCHES + b) * RECORDS), RECORDS)
        results: dict[int, bool] = {}

        def finish(i: int) -> None:
            goodbye = pb.Goodbye(records_sent=BATCHES * RECORDS)
            results[i] = deliveries[i].finish(goodbye, timeout=60)

        threads = [threading.Thread(target=finish, args=(i,)) for i in range(PROCESSES)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(80)
        assert results == {i: True for i in range(PROCESSES)}
        assert all(d.spooled_records == 0 and d.dropped == 0 for d in deliveries)
        assert failures.reasons == []  # busy is flow control, not a failure to report
        # Some were refused at first: the limit was real.
        refused = server.metrics.value(
            "tfprof_collector_request_errors_total", code="RESOURCE_EXHAUSTED"
        )
        assert refused > 0
    finally:
        client.close()
        server.stop(grace=1.0)
    (job,) = server.store.load_jobs()
    assert len(job.streams) == PROCESSES
    assert all(s.finished and s.num_records == BATCHES * RECORDS for s in job.streams)
    assert list((tmp_path / "spool").rglob("*.log")) == []


def test_a_batch_over_the_size_limit_is_not_retried(tmp_path: Path) -> None:
    server = CollectorServer("127.0.0.1:0", str(tmp_path / "data"), max_message_bytes=4096).start()
    client = CollectorClient(server.address)
    failures = Failures()
    try:
        delivery = StreamDelivery(client, hello(), None, failures)
        delivery.send(batch(2000), 2000)
        assert not delivery.finish(pb.Goodbye(records_sent=2000), timeout=20)
        assert failures.reasons and "RESOURCE_EXHAUSTED" in failures.reasons[0]
        assert delivery.dropped == 2000  # no spool given: counted, never silently lost
    finally:
        client.close()
        server.stop(grace=1.0)
