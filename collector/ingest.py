"""Ingest logic of one agent stream, free of gRPC: hello, batches, goodbye.

The servicer feeds it messages and turns its errors into status codes.
"""

from __future__ import annotations

import logging

import numpy as np

from tfprof.collector.errors import FailedPrecondition, InvalidArgument, Unsupported
from tfprof.collector.store import Store, StreamWriter
from tfprof.proto import collector_pb2 as pb

log = logging.getLogger("tfprof.collector.ingest")

PROTOCOL_VERSION = 1
RECORD_FIELDS = [f.name for f in pb.Records.DESCRIPTOR.fields]
HOST_FIELDS = [f.name for f in pb.HostSamples.DESCRIPTOR.fields]


def _check_columns(msg: object, fields: list[str], what: str, sparse: bool) -> None:
    """All columns as long as the first; with ``sparse``, empty ones (all zero) too."""
    lengths = {name: len(getattr(msg, name)) for name in fields}
    n = lengths[fields[0]]
    bad = {k: v for k, v in lengths.items() if v != n and not (sparse and v == 0)}
    if bad:
        raise InvalidArgument(f"{what} columns have different lengths: {bad}, expected {n}")


class IngestStream:
    """Validates and stores one stream. Call ``hello`` first, then ``batch``..."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.writer: StreamWriter | None = None
        self.hello_msg: pb.Hello | None = None
        self.records = 0
        self.duplicates = 0

    def hello(self, hello: pb.Hello) -> int:
        if self.writer is not None:
            raise FailedPrecondition("second hello on one stream")
        if hello.protocol_version != PROTOCOL_VERSION:
            raise Unsupported(
                f"protocol version {hello.protocol_version} is not supported "
                f"(this collector speaks {PROTOCOL_VERSION})"
            )
        self.writer = self.store.open_stream(hello)
        self.hello_msg = hello
        log.info(
            "stream %s of job %s (%s pid %d) opened",
            hello.stream_id,
            hello.job,
            hello.host,
            hello.pid,
        )
        return self.writer.last_seq

    def batch(self, batch: pb.Batch) -> int:
        if self.writer is None:
            raise FailedPrecondition("batch before hello")
        if batch.seq == 0:
            raise InvalidArgument("batch sequence numbers start at 1")
        _check_columns(batch.records, RECORD_FIELDS, "record", sparse=True)
        _check_columns(batch.host, HOST_FIELDS, "host sample", sparse=False)
        if len(batch.records.duration_ns) and np.array(batch.records.duration_ns).min() < 0:
            raise InvalidArgument("negative record duration")
        if self.writer.append(batch):
            self.records += len(batch.records.kind)
        else:
            self.duplicates += 1
        return self.writer.last_seq

    def goodbye(self, goodbye: pb.Goodbye) -> None:
        if self.writer is None:
            raise FailedPrecondition("goodbye before hello")
        self.writer.finish(goodbye)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
