"""Streams one collector holds: N idle agent streams (hello only) plus a few delivering
ones, against a real ``tfprof-collector serve`` process. Prints streams held, the
collector's RSS and threads, how long opening took, health-check latency while held, and
whether the delivering streams got through without spooling. Asserts nothing.

    python bench/streams.py [--idle 10000] [--delivering 8] [--batches 20]

The idle streams are held by this process with grpc.aio (a coroutine each, ~100 per
channel); the delivering ones use the agent's own delivery code (StreamDelivery).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import psutil
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tfprof.core.version import PROTOCOL_VERSION
from tfprof.proto import collector_pb2 as pb
from tfprof.proto import collector_pb2_grpc as pb_grpc

RECORDS = 2000  # per delivering batch


def start_serve(data: Path, max_streams: int) -> tuple[subprocess.Popen[str], str, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tfprof.collector.cli", "serve", "--listen", "127.0.0.1:0",
         "--data-dir", str(data), "--metrics-listen", "127.0.0.1:0", "--log-level", "WARNING",
         "--max-streams", str(max_streams)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    address = metrics = ""
    while not metrics:
        line = proc.stdout.readline()
        if not line:
            raise SystemExit("collector did not start")
        if line.startswith("listening on "):
            address = line.split()[-1]
        if line.startswith("metrics on "):
            metrics = line.split()[-1]
    return proc, address, metrics


def active_streams(metrics_url: str) -> int:
    with urllib.request.urlopen(metrics_url, timeout=30) as reply:
        for line in reply.read().decode().splitlines():
            if line.startswith("tfprof_collector_active_streams "):
                return int(float(line.split()[1]))
    return 0


async def open_idle(address: str, count: int, per_channel: int) -> tuple[list[Any], list[Any]]:
    channels = [grpc.aio.insecure_channel(address) for _ in range(0, count, per_channel)]
    calls: list[Any] = []

    async def one(index: int) -> None:
        stub: Any = pb_grpc.CollectorStub(channels[index // per_channel])
        hello = pb.Hello(protocol_version=PROTOCOL_VERSION, stream_secret=b"s" * 32,
                         job=f"idle{index % 100}", run_id="r1",
                         stream_id=f"idle-{index}", host=f"node{index % 64}", pid=index + 1,
                         task=str(index))  # fmt: skip
        call = stub.Stream()
        try:
            await call.write(pb.AgentMessage(hello=hello))
            await call.read()
            calls.append(call)
        except grpc.RpcError:
            pass

    await asyncio.gather(*(one(i) for i in range(count)))
    return calls, channels


def deliver(address: str, streams: int, batches: int) -> tuple[int, int, float]:
    """(streams delivered, records spooled or dropped, seconds)."""
    from tfprof.agent.relay.collector_client import CollectorClient
    from tfprof.agent.relay.delivery import StreamDelivery

    client = CollectorClient(address)
    results: list[tuple[bool, int]] = []
    started = time.perf_counter()

    def one(i: int) -> None:
        hello = pb.Hello(protocol_version=PROTOCOL_VERSION, stream_secret=b"s" * 32,
                         job="busy", run_id="r1", stream_id=f"busy-{i}",
                         host="node-busy", pid=100000 + i, task=str(i))  # fmt: skip
        delivery = StreamDelivery(client, hello)
        for b in range(batches):
            message = pb.AgentMessage()
            r = message.batch.records
            first = (i * batches + b) * RECORDS
            r.kind.extend([pb.KERNEL] * RECORDS)
            r.start_ns.extend(range(first, first + RECORDS))
            r.duration_ns.extend([100] * RECORDS)
            delivery.send(message, RECORDS)
        ok = delivery.finish(pb.Goodbye(records_sent=batches * RECORDS), timeout=300)
        results.append((ok, delivery.spooled_records + delivery.dropped))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    client.close()
    return (
        sum(ok for ok, _ in results),
        sum(lost for _, lost in results),
        (time.perf_counter() - started),
    )


def health_latencies(address: str, samples: int) -> list[float]:
    out = []
    with grpc.insecure_channel(address) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        for _ in range(samples):
            t = time.perf_counter()
            stub.Check(health_pb2.HealthCheckRequest(), timeout=30)
            out.append((time.perf_counter() - t) * 1e3)
            time.sleep(0.05)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--idle", type=int, default=10000, help="idle streams (default 10000)")
    parser.add_argument("--delivering", type=int, default=8, help="delivering streams")
    parser.add_argument("--batches", type=int, default=20, help="batches per delivering stream")
    parser.add_argument("--per-channel", type=int, default=100, help="idle streams per channel")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="tfprof-streams-") as tmp:
        proc, address, metrics = start_serve(Path(tmp) / "data", args.idle + args.delivering)
        collector = psutil.Process(proc.pid)
        base_rss = collector.memory_info().rss
        loop = asyncio.new_event_loop()
        threading.Thread(target=loop.run_forever, daemon=True).start()
        try:
            t = time.perf_counter()
            calls, channels = asyncio.run_coroutine_threadsafe(
                open_idle(address, args.idle, args.per_channel), loop
            ).result()
            opened_s = time.perf_counter() - t
            held = active_streams(metrics)
            idle_rss, idle_threads = collector.memory_info().rss, collector.num_threads()
            lat = health_latencies(address, 20)
            delivered, lost, deliver_s = deliver(address, args.delivering, args.batches)
            busy_rss, busy_threads = collector.memory_info().rss, collector.num_threads()
            still = active_streams(metrics)
            print(f"idle streams opened: {len(calls):,} of {args.idle:,} in {opened_s:.1f} s "
                  f"({args.per_channel} per channel, {len(channels)} channels)")  # fmt: skip
            print(f"streams held (collector metric): {held:,}; after delivery: {still:,}")
            print(f"collector RSS: {base_rss / 2**20:.0f} MiB empty, {idle_rss / 2**20:.0f} MiB "
                  f"holding, {busy_rss / 2**20:.0f} MiB after delivery "
                  f"({(idle_rss - base_rss) / max(1, len(calls)) / 1024:.1f} KiB per idle "
                  f"stream)")  # fmt: skip
            print(f"collector threads: {idle_threads} holding, {busy_threads} after delivery")
            print(f"health check while holding: median {statistics.median(lat):.1f} ms, "
                  f"max {max(lat):.1f} ms")  # fmt: skip
            records = args.delivering * args.batches * RECORDS
            print(
                f"delivering streams: {delivered}/{args.delivering} delivered, {lost:,} "
                f"records spooled or dropped, {records:,} records in {deliver_s:.1f} s"
            )
        finally:
            proc.terminate()
            proc.wait(60)


if __name__ == "__main__":
    main()
