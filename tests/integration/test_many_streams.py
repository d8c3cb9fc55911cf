"""64 agent streams at once against one collector process: all stored, none mixed up."""

from __future__ import annotations

import threading
from pathlib import Path

from tfprof.agent.client import CollectorClient
from tfprof.agent.delivery import StreamDelivery
from tfprof.collector.store import Store
from tfprof.proto import collector_pb2 as pb

from .conftest import Collector

STREAMS = 64
BATCHES = 10
RECORDS = 500


def stream(client: CollectorClient, index: int, results: dict[int, bool]) -> None:
    hello = pb.Hello(protocol_version=1, job=f"job{index % 8}", run_id="r1",
                     stream_id=f"s{index}", host=f"node{index % 4}", pid=1000 + index,
                     task=str(index))  # fmt: skip
    delivery = StreamDelivery(client, hello)
    for b in range(BATCHES):
        message = pb.AgentMessage()
        batch = message.batch
        batch.records.kind.extend([pb.KERNEL] * RECORDS)
        first = (index * BATCHES + b) * RECORDS
        batch.records.start_ns.extend(range(first, first + RECORDS))
        batch.records.duration_ns.extend([100] * RECORDS)
        batch.records.stream.extend([index] * RECORDS)
        delivery.send(message, RECORDS)
    results[index] = delivery.finish(pb.Goodbye(records_sent=BATCHES * RECORDS), timeout=120)


def test_64_concurrent_streams(collector: Collector, tmp_path: Path) -> None:
    client = CollectorClient(collector.address)
    results: dict[int, bool] = {}
    threads = [threading.Thread(target=stream, args=(client, i, results)) for i in range(STREAMS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    client.close()
    assert len(results) == STREAMS and all(results.values())

    jobs = Store(collector.data_dir).load_jobs()
    streams = [s for job in jobs for s in job.streams]
    assert len(streams) == STREAMS
    for s in streams:
        index = int(s.task)
        assert s.finished
        assert s.num_records == BATCHES * RECORDS
        # Each stream holds exactly its own records, in order.
        first = index * BATCHES * RECORDS
        assert s.records["start_ns"].tolist() == list(range(first, first + BATCHES * RECORDS))
        assert set(s.records["stream"].tolist()) == {index}
