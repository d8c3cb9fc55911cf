"""Many streams against one collector: 64 delivering at once, all stored, none mixed up;
2,000 idle ones held open while real jobs deliver without spooling, health answering."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tfprof.agent.relay.collector_client import CollectorClient
from tfprof.agent.relay.delivery import StreamDelivery
from tfprof.collector.store import Store
from tfprof.core.version import PROTOCOL_VERSION
from tfprof.proto import collector_pb2 as pb

from .collector_proc import start_serve
from .conftest import Collector, agent_cmd, clean_env
from .idle_streams import IdleStreams

STREAMS = 64
BATCHES = 10
RECORDS = 500


def stream(client: CollectorClient, index: int, results: dict[int, bool]) -> None:
    hello = pb.Hello(protocol_version=PROTOCOL_VERSION, stream_secret=b"s" * 32,
                     job=f"job{index % 8}", run_id="r1",
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


IDLE = 2000
JOBS = 2


def scrape(metrics_url: str, name: str) -> float:
    import urllib.request

    with urllib.request.urlopen(metrics_url, timeout=10) as reply:
        text = reply.read().decode()
    line = next(ln for ln in text.splitlines() if ln.startswith(name + " "))
    return float(line.split()[1])


def start_job(address: str, job: str, spool: Path) -> subprocess.Popen[str]:
    cmd = agent_cmd(
        "run", "--collector", address, "--job", job, "--source", "replay:demo",
        "--replay-speed", "max", "--host-metrics-interval", "0", "--spool-dir", str(spool),
        "--", sys.executable, "-c", "print('job done')",
    )  # fmt: skip
    return subprocess.Popen(
        cmd, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@pytest.mark.timeout(300)
def test_2000_idle_streams_held_while_real_jobs_deliver_without_spooling(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    serve = start_serve(data, "--metrics-listen", "127.0.0.1:0")
    assert serve.metrics_url is not None
    idle = IdleStreams(serve.address, IDLE)
    health_failures: list[str] = []
    checks = 0
    stop_checking = threading.Event()

    def check_health() -> None:
        nonlocal checks
        while not stop_checking.wait(0.2):
            try:
                assert serve.healthy(timeout=5)
                checks += 1
            except Exception as exc:  # any failure is recorded, the loop goes on
                health_failures.append(repr(exc))

    checker = threading.Thread(target=check_health, daemon=True)
    checker.start()
    spool = tmp_path / "spool"
    try:
        idle.open()
        assert (idle.opened, idle.refused) == (IDLE, [])
        assert scrape(serve.metrics_url, "tfprof_collector_active_streams") == IDLE
        jobs = [start_job(serve.address, f"real{i}", spool) for i in range(JOBS)]
        outputs = [job.communicate(timeout=180) for job in jobs]
        assert [job.returncode for job in jobs] == [0] * JOBS, outputs
        # The idle streams are still held after the jobs came and went.
        assert scrape(serve.metrics_url, "tfprof_collector_active_streams") == IDLE
    finally:
        stop_checking.set()
        checker.join(10)
        idle.close()
        assert serve.terminate() == 0
    assert health_failures == [] and checks > 0
    assert list(spool.rglob("batches.log")) == []  # nothing waited in the spool
    stored = {job.name: job for job in Store(data).load_jobs([f"real{i}" for i in range(JOBS)])}
    assert sorted(stored) == [f"real{i}" for i in range(JOBS)]
    counts = {name: job.num_records for name, job in stored.items()}
    assert len(set(counts.values())) == 1 and counts["real0"] > 0  # the same demo, all of it
    assert all(s.finished for job in stored.values() for s in job.streams)
