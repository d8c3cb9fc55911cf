"""Streams of every record kind written to a data dir, and compacted into the lake."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tfprof.collector.lake.location import lake_of
from tfprof.collector.lake.publish import compact_data_dir
from tfprof.collector.lake.segments import collector_id
from tfprof.collector.store import Store
from tfprof.core.records import COLUMNS, RecordKind
from tfprof.core.version import PROTOCOL_VERSION
from tfprof.proto import collector_pb2 as pb

OFFSET = 1_000  # the hello's clock offset to the collector


def hello(stream_id: str = "s1", job: str = "train", run_id: str = "r1") -> pb.Hello:
    return pb.Hello(protocol_version=PROTOCOL_VERSION, stream_secret=b"s" * 32,
                    job=job, run_id=run_id, stream_id=stream_id,
                    host="node-a", pid=42, task="3", argv=["python", "t.py"],
                    clock_offset_ns=OFFSET,
                    devices=[pb.Device(ordinal=0, uuid="GPU-0", name="A100")])  # fmt: skip


KINDS = len(RecordKind)


def records_batch(seq: int, start: int, n: int = KINDS, **extra: Any) -> pb.Batch:
    """One record of every kind, cycling, with names from the string table."""
    b = pb.Batch(seq=seq, **extra)
    r = b.records
    kinds = [RecordKind(1 + i % KINDS) for i in range(n)]
    r.kind.extend(pb.RecordKind.ValueType(k) for k in kinds)
    r.start_ns.extend(start + 10 * i for i in range(n))
    r.duration_ns.extend(5 + i for i in range(n))
    r.name.extend(1 + i % 2 for i in range(n))
    r.bytes.extend(100 * i for i in range(n))
    r.copy_kind.extend(1 if k == RecordKind.MEMCPY else 0 for k in kinds)
    r.block_x.extend(256 for _ in kinds)
    r.category.extend(2 if k == RecordKind.MARKER else 0 for k in kinds)
    r.thread.extend(7 for _ in kinds)
    for col in COLUMNS:
        if not len(getattr(r, col)):
            getattr(r, col).extend([0] * n)
    return b


def write_stream(data_dir: Path, batches: list[pb.Batch], stream_id: str = "s1",
                 job: str = "train", finish: bool = True) -> Path:  # fmt: skip
    store = Store(data_dir)
    writer = store.open_stream(hello(stream_id, job))
    for b in batches:
        writer.append(b)
    if finish:
        writer.finish(pb.Goodbye(records_sent=1, dropped_tracer=2, exit_code=0))
    writer.close()
    return writer.directory


def first_batch() -> pb.Batch:
    return records_batch(1, 10_000, strings=["gemm", "relu"], string_base=1)


def compact(data_dir: Path) -> None:
    _done, failed = compact_data_dir(data_dir, lake_of(data_dir), collector_id(data_dir))
    assert not failed
