"""Bytes on disk per record, durable log vs Parquet segments, and the compaction rate.

Replicates a real recorded GPU trace (Kineto, shipped in tests/data/traces) to N records
with time shifted forward each copy, stores it through the collector's own
``StreamWriter`` in batches of 8,192 records (fsync off: the log's bytes are what is
measured here), then compacts the stream into a lake as ``serve`` does and queries it.
The segments are also rewritten with each other Parquet codec (same row groups and
dictionaries), for the choice of zstd in lake/fs.py. Prints figures; asserts nothing.

    python bench/store_bytes.py [--records 1000000] [--trace PATH]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from tfprof.core.version import PROTOCOL_VERSION

REPO = Path(__file__).resolve().parents[1]
TRACE = REPO / "tests/data/traces/kineto-hta/simple_add.json.gz"
BATCH = 8192


def write_log(data_dir: Path, trace: Path, records: int) -> int:
    from tfprof.collector.jobdata import RECORD_COLUMNS
    from tfprof.collector.store import Store
    from tfprof.collector.store.importer import load_files, stream_from
    from tfprof.proto import collector_pb2 as pb

    (loaded,) = load_files([trace])
    one = stream_from(loaded, "bench", "r1", "0", 1, 0)
    span = int((one.records["start_ns"] + one.records["duration_ns"]).max()) + 1
    copies = -(-records // one.num_records)
    cols = {
        c: np.concatenate([one.records[c] + (i * span if c == "start_ns" else 0)
                           for i in range(copies)])[:records]
        for c in RECORD_COLUMNS
    }  # fmt: skip
    hello = pb.Hello(protocol_version=PROTOCOL_VERSION, stream_secret=b"s" * 32,
                     job="bench", run_id="r1", stream_id="s1",
                     host="node", pid=1, task="0")  # fmt: skip
    writer = Store(data_dir, fsync=False).open_stream(hello)
    for seq, a in enumerate(range(0, records, BATCH), start=1):
        batch = pb.Batch(seq=seq)
        if seq == 1:
            batch.strings.extend(one.strings)
        for c in RECORD_COLUMNS:
            values = cols[c][a : a + BATCH]
            if values.any():
                getattr(batch.records, c).extend(values.tolist())
        writer.append(batch)
    writer.finish(pb.Goodbye(records_sent=records))
    writer.close()
    return (writer.directory / "batches.log").stat().st_size


def rewritten_bytes(lake_dir: Path, codec: str) -> int:
    """Bytes of the lake's segments rewritten with ``codec`` (lake/fs.py's other options)."""
    import pyarrow.parquet as pq

    from tfprof.collector.lake.fs import ROW_GROUP_ROWS

    total = 0
    with tempfile.TemporaryDirectory() as out:
        for i, path in enumerate(sorted(lake_dir.rglob("*.parquet"))):
            target = Path(out) / f"{i}.parquet"
            pq.write_table(pq.read_table(path), target, compression=codec,
                           row_group_size=ROW_GROUP_ROWS, use_dictionary=True)  # fmt: skip
            total += target.stat().st_size
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--trace", type=Path, default=TRACE)
    args = parser.parse_args()

    from tfprof.collector.lake.fs import open_lake
    from tfprof.collector.lake.publish import compact_data_dir
    from tfprof.collector.lake.query import Engine, run_query
    from tfprof.collector.lake.segments import collector_id

    tmp = Path(tempfile.mkdtemp(prefix="tfprof-store-bytes-"))
    try:
        log_bytes = write_log(tmp / "data", args.trace, args.records)
        lake = open_lake(tmp / "lake")
        t0 = time.perf_counter()
        done, failed = compact_data_dir(tmp / "data", lake, collector_id(tmp / "data"))
        compact_s = time.perf_counter() - t0
        assert not failed and done.records == args.records, (done, failed)
        parquet_bytes = sum(p.stat().st_size for p in (tmp / "lake").rglob("*.parquet"))
        t0 = time.perf_counter()
        result = run_query(Engine([str(tmp / "lake")]),
                           "SELECT count(*) AS n FROM kernel_summary")  # fmt: skip
        query_s = time.perf_counter() - t0
        n = args.records
        print(f"records                    {n:,} (from {args.trace.name})")
        print(f"durable log                {log_bytes:,} bytes  {log_bytes / n:.2f} B/record")
        print(f"parquet segments (zstd)    {parquet_bytes:,} bytes  "
              f"{parquet_bytes / n:.2f} B/record  ({done.files} files)")  # fmt: skip
        print(f"parquet / log              {parquet_bytes / log_bytes:.3f}")
        for codec in ("snappy", "gzip", "lz4", "none"):
            other = rewritten_bytes(tmp / "lake", codec)
            print(f"  same segments, {codec:<9} {other:,} bytes  {other / n:.2f} B/record  "
                  f"(zstd: {parquet_bytes / other:.2f}x its size)")  # fmt: skip
        print(f"compaction                 {compact_s:.2f} s  {n / compact_s:,.0f} records/s")
        print(f"kernel_summary over lake   {query_s:.2f} s  "
              f"({result.column('n')[0].as_py()} kernel names)")  # fmt: skip
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
