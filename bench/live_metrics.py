"""Cost of the per-job/GPU live figures (collector/service/live_figures.py) against the
rest of ingest.

Per batch of ``--batch`` records (kernels on ``--cuda-streams`` CUDA streams of 2 GPUs,
copies, memsets, API calls): the time ``StreamAccount.batch_stored`` takes beside
``check_batch`` (validation every batch already pays), as microseconds per batch and
nanoseconds per record. Then the scrape side at the cardinality bound: exposition of
``--jobs`` jobs on ``--gpus`` GPUs each and its parse by ``top``. Prints figures;
asserts nothing.

    python bench/live_metrics.py [--batch 8192] [--cuda-streams 8] [--jobs 1000] [--gpus 8]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from tfprof.collector.service.live_figures import MAX_JOBS, LiveAccounting
from tfprof.collector.service.metrics import CollectorMetrics
from tfprof.collector.service.validate import check_batch
from tfprof.collector.top.scrape import parse_metrics
from tfprof.core.version import PROTOCOL_VERSION
from tfprof.proto import collector_pb2 as pb

T0 = 1_780_000_000 * 10**9


def make_batch(rng: np.random.Generator, seq: int, n: int, cuda_streams: int) -> pb.Batch:
    b = pb.Batch(seq=seq)
    r = b.records
    kinds = rng.choice([pb.KERNEL] * 6 + [pb.MEMCPY, pb.MEMSET, pb.API, pb.API], n)
    starts = T0 + seq * 10**9 + np.sort(rng.integers(0, 10**9, n))
    r.kind.extend(kinds.tolist())
    r.start_ns.extend(starts.tolist())
    r.duration_ns.extend(rng.integers(1_000, 200_000, n).tolist())
    r.device.extend(rng.integers(0, 2, n).tolist())
    r.stream.extend(rng.integers(0, cuda_streams, n).tolist())
    copies = kinds == pb.MEMCPY
    r.copy_kind.extend(np.where(copies, rng.integers(1, 3, n), 0).tolist())
    r.bytes.extend(np.where(copies, rng.integers(1, 1 << 24, n), 0).tolist())
    return b


def timed(fn: object, repeat: int) -> float:
    """Median seconds of ``repeat`` calls."""
    assert callable(fn)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def per_batch(args: argparse.Namespace) -> None:
    rng = np.random.default_rng(1)
    batches = [make_batch(rng, i + 1, args.batch, args.cuda_streams) for i in range(args.batches)]
    hello = pb.Hello(protocol_version=PROTOCOL_VERSION, job="bench", host="node", run_id="r")
    account = LiveAccounting().open_stream(hello)
    it = iter(batches)
    live = timed(lambda: account.batch_stored(next(it)), args.batches)
    it = iter(batches)
    check = timed(lambda: check_batch(next(it)), args.batches)
    n = args.batch
    print(f"batch of {n:,} records, {args.cuda_streams} CUDA streams on 2 GPUs:")
    print(f"  live figures  {live * 1e6:9.0f} us/batch  {live / n * 1e9:6.0f} ns/record")
    print(f"  check_batch   {check * 1e6:9.0f} us/batch  {check / n * 1e9:6.0f} ns/record")
    print(f"  live / check  {live / check:9.2f}")


def scrape_side(args: argparse.Namespace) -> None:
    metrics = CollectorMetrics()
    rng = np.random.default_rng(2)
    for j in range(min(args.jobs, MAX_JOBS)):
        devices = [pb.Device(ordinal=g, uuid=f"GPU-{j:04d}-{g}") for g in range(args.gpus)]
        hello = pb.Hello(protocol_version=PROTOCOL_VERSION, job=f"job-{j}", host=f"node-{j % 64}",
                         run_id="r", devices=devices)  # fmt: skip
        account = metrics.live.open_stream(hello)
        batch = make_batch(rng, 1, 64, 2)
        batch.records.device[:] = rng.integers(0, args.gpus, 64).tolist()
        account.batch_stored(batch)
    expose = timed(metrics.exposition, 5)
    text = metrics.exposition().decode()
    parse = timed(lambda: parse_metrics(text, 0.0), 5)
    print(f"{args.jobs:,} jobs x {args.gpus} GPUs:")
    print(f"  exposition    {expose * 1e3:9.1f} ms  {len(text) / 1e6:.1f} MB")
    print(f"  top's parse   {parse * 1e3:9.1f} ms")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--batch", type=int, default=8192, help="records per batch (default 8192)")
    p.add_argument("--batches", type=int, default=50, help="batches timed (default 50)")
    p.add_argument("--cuda-streams", type=int, default=8, help="CUDA streams (default 8)")
    p.add_argument("--jobs", type=int, default=1000, help="jobs on the endpoint (default 1000)")
    p.add_argument("--gpus", type=int, default=8, help="GPUs per job (default 8)")
    args = p.parse_args()
    per_batch(args)
    scrape_side(args)


if __name__ == "__main__":
    main()
