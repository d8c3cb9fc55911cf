"""Collector ingest: sustained records/s with 1 and 64 concurrent agent streams, the
collector's peak RSS, recovery time after SIGKILL + restart, and spool replay rate.

Starts a real collector process (``tfprof-collector serve``) and drives it with the
agent's own delivery code (StreamDelivery) from separate load-generator processes.
Prints figures; asserts nothing.

    python bench/collector_ingest.py [--records N] [--streams 1,64]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event
from pathlib import Path

import numpy as np

from tfprof.core.version import PROTOCOL_VERSION

BATCH = 8192


def make_batch(rng: np.random.Generator, first: int) -> bytes:
    from tfprof.proto import collector_pb2 as pb

    message = pb.AgentMessage()
    b = message.batch
    b.string_base = 1
    b.strings.extend(f"kernel_{i}" for i in range(32))
    n = BATCH
    r = b.records
    r.kind.extend([pb.KERNEL] * n)
    r.start_ns.extend((1_800_000_000_000_000_000 + first * 1000 + np.arange(n) * 1000).tolist())
    r.duration_ns.extend(rng.integers(1_000, 50_000, n).tolist())
    r.stream.extend(rng.integers(7, 11, n).tolist())
    r.correlation.extend(range(first, first + n))
    r.name.extend(rng.integers(1, 33, n).tolist())
    for col in ("grid_x", "block_x", "registers"):
        getattr(r, col).extend(rng.integers(1, 256, n).tolist())
    return message.SerializeToString()


def start_collector(data: Path, listen: str = "127.0.0.1:0") -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tfprof.collector.cli", "--log-level", "WARNING", "serve",
         "--listen", listen, "--data-dir", str(data)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("listening on "):
        proc.kill()
        raise SystemExit(f"collector did not start: {line!r}")
    return proc, line.split()[-1]


def peak_rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def generator(address: str, streams: range, batches: int, ready: Event, go: Event,
              done: Queue[tuple[int, bool, int]]) -> None:  # fmt: skip
    from tfprof.agent.relay.collector_client import CollectorClient
    from tfprof.agent.relay.delivery import StreamDelivery
    from tfprof.proto import collector_pb2 as pb

    rng = np.random.default_rng(0)
    payload = make_batch(rng, 0)
    client = CollectorClient(address)
    ready.set()
    go.wait()

    def one(i: int) -> None:
        hello = pb.Hello(protocol_version=PROTOCOL_VERSION, stream_secret=b"s" * 32,
                         job=f"bench{i % 8}", run_id="r1",
                         stream_id=f"s{i}", host="bench", pid=i, task=str(i))  # fmt: skip
        d = StreamDelivery(client, hello)
        for _ in range(batches):
            d.send(pb.AgentMessage.FromString(payload), BATCH)
        ok = d.finish(pb.Goodbye(records_sent=batches * BATCH), timeout=600)
        done.put((i, ok, d.records_acked))

    threads = [threading.Thread(target=one, args=(i,)) for i in streams]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    client.close()


def ingest(records: int, streams: int, workers: int) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="tfprof-bench-ingest-"))
    proc, address = start_collector(tmp / "data")
    try:
        batches = max(1, records // (BATCH * streams))
        ctx = mp.get_context("spawn")
        go, done = ctx.Event(), ctx.Queue()
        readies, procs = [], []
        per = [range(w, streams, workers) for w in range(min(workers, streams))]
        for part in per:
            ready = ctx.Event()
            p = ctx.Process(target=generator, args=(address, part, batches, ready, go, done))
            p.start()
            readies.append(ready)
            procs.append(p)
        for ready in readies:
            ready.wait(60)
        t0 = time.perf_counter()
        go.set()
        results = [done.get(timeout=900) for _ in range(streams)]
        elapsed = time.perf_counter() - t0
        for p in procs:
            p.join(60)
        acked = sum(r[2] for r in results)
        ok = all(r[1] for r in results)
        rss = peak_rss(proc.pid)
        print(
            f"{streams:>3} streams: {acked:,} records in {elapsed:.2f} s = "
            f"{acked / elapsed:,.0f} records/s; all delivered: {ok}; "
            f"collector peak RSS {rss / 2**20:,.0f} MiB"
        )
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)


def recovery() -> None:
    """SIGKILL the collector mid-stream, restart it at once: time until acks resume."""
    from tfprof.agent.relay.collector_client import CollectorClient
    from tfprof.agent.relay.delivery import StreamDelivery
    from tfprof.proto import collector_pb2 as pb

    tmp = Path(tempfile.mkdtemp(prefix="tfprof-bench-recovery-"))
    proc, address = start_collector(tmp / "data")
    payload = make_batch(np.random.default_rng(0), 0)
    client = CollectorClient(address)
    hello = pb.Hello(protocol_version=PROTOCOL_VERSION, stream_secret=b"s" * 32,
                     job="recovery", run_id="r1", stream_id="s1",
                     host="bench", pid=1, task="0")  # fmt: skip
    d = StreamDelivery(client, hello)
    try:
        for _ in range(20):
            d.send(pb.AgentMessage.FromString(payload), BATCH)
        while d.acked_seq < 20:
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        for _ in range(20):  # keeps coming while the collector is gone
            d.send(pb.AgentMessage.FromString(payload), BATCH)
        t0 = time.perf_counter()
        proc, _ = start_collector(tmp / "data", listen=address)
        started = time.perf_counter() - t0
        while d.acked_seq <= 20:
            time.sleep(0.005)
        resumed = time.perf_counter() - t0
        ok = d.finish(pb.Goodbye(), timeout=60)
        print(
            f"SIGKILL + restart: collector up again after {started:.2f} s, stream resumed "
            f"{resumed:.2f} s after the restart began; all delivered: {ok}"
        )
    finally:
        client.close()
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)


def spool_replay(records: int) -> None:
    """Fill a spool while no collector answers, then time flush_spool into a live one."""
    from tfprof.agent.relay.collector_client import CollectorClient
    from tfprof.agent.relay.delivery import StreamDelivery
    from tfprof.agent.relay.flush import flush_spool
    from tfprof.agent.relay.spool import Spool
    from tfprof.proto import collector_pb2 as pb

    tmp = Path(tempfile.mkdtemp(prefix="tfprof-bench-spool-"))
    spool = Spool(tmp / "spool", 8 << 30)
    payload = make_batch(np.random.default_rng(0), 0)
    down = CollectorClient("127.0.0.1:1")
    hello = pb.Hello(protocol_version=PROTOCOL_VERSION, stream_secret=b"s" * 32,
                     job="spooled", run_id="r1", stream_id="s1",
                     host="bench", pid=1, task="0")  # fmt: skip
    d = StreamDelivery(down, hello, spool, memory_bytes=1)
    batches = max(1, records // BATCH)
    for _ in range(batches):
        d.send(pb.AgentMessage.FromString(payload), BATCH)
    d.finish(pb.Goodbye(), timeout=0)
    down.close()
    size = sum(p.stat().st_size for p in spool.root.rglob("*") if p.is_file())
    proc, address = start_collector(tmp / "data")
    try:
        t0 = time.perf_counter()
        result = flush_spool(spool, CollectorClient, target=address, timeout=600)
        elapsed = time.perf_counter() - t0
        print(
            f"spool replay: {result.delivered_records:,} records ({size / 2**20:,.0f} MiB) "
            f"in {elapsed:.2f} s = {result.delivered_records / elapsed:,.0f} records/s"
        )
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2_000_000, help="records per ingest run")
    parser.add_argument("--streams", default="1,64", help="comma-separated stream counts")
    parser.add_argument("--workers", type=int, default=2, help="load-generator processes")
    args = parser.parse_args()
    print(f"cpu cores: {os.cpu_count()}, batch: {BATCH} records")
    for n in (int(s) for s in args.streams.split(",")):
        ingest(args.records, n, args.workers)
    recovery()
    spool_replay(args.records // 2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
