"""Ingest logic of one agent stream, free of gRPC: hello, batches, goodbye.

The servicer feeds it messages and turns its errors into status codes. Every message is
validated whole (collector/service/validate.py) before anything of it is written.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from tfprof.collector.errors import FailedPrecondition, StorageUnavailable, Unsupported
from tfprof.collector.service.live_figures import StreamAccount
from tfprof.collector.service.metrics import CollectorMetrics
from tfprof.collector.service.validate import check_batch, check_goodbye, check_hello
from tfprof.collector.store import Store
from tfprof.collector.store.loader import record_shift
from tfprof.collector.store.writer import StreamWriter
from tfprof.core.redact import DEFAULT_PATTERNS, redact_argv
from tfprof.core.version import PROTOCOL_VERSION
from tfprof.proto import collector_pb2 as pb

log = logging.getLogger("tfprof.collector.service.ingest")


class IngestStream:
    """Validates and stores one stream. Call ``hello`` first, then ``batch``..."""

    def __init__(
        self,
        store: Store,
        metrics: CollectorMetrics | None = None,
        redact: Sequence[str] = DEFAULT_PATTERNS,
    ) -> None:
        self.store = store
        self.metrics = metrics
        self.redact = tuple(redact)
        self.writer: StreamWriter | None = None
        self.hello_msg: pb.Hello | None = None
        self.records = 0
        self.duplicates = 0
        self._dropped_seen = 0  # highest cumulative ``Batch.dropped`` counted so far
        self._shift = 0  # what readers add to this stream's record times
        self.live: StreamAccount | None = (
            None  # per-job/GPU figures (collector/service/live_figures.py)
        )

    def hello(self, hello: pb.Hello, on_superseded: Callable[[], None] | None = None) -> int:
        """Open the stream; ``on_superseded`` is called (from any thread) when the
        stream is resumed on a newer call, which this one must then end."""
        if self.writer is not None:
            raise FailedPrecondition("second hello on one stream")
        if hello.protocol_version != PROTOCOL_VERSION:
            raise Unsupported(
                f"protocol version {hello.protocol_version} is not supported "
                f"(this collector speaks {PROTOCOL_VERSION})"
            )
        check_hello(hello)
        # Again here, for agents that did not (older ones, other clients): what is stored
        # and shown has no secrets in its command line.
        redacted = redact_argv(hello.argv, self.redact)
        if redacted != list(hello.argv):
            del hello.argv[:]
            hello.argv.extend(redacted)
        try:
            self.writer = self.store.open_stream(hello, self, on_superseded)
        except OSError as exc:
            raise StorageUnavailable(f"cannot open stream {hello.stream_id}: {exc}") from exc
        self.hello_msg = hello
        self._shift = record_shift(hello)
        self._dropped_seen = self.writer.summary.dropped_queue
        if self.metrics is not None:
            self.metrics.stream_opened()
            self.live = self.metrics.live.open_stream(hello)
        log.info(
            "stream %s of job %s run %s (%s pid %d) opened at seq %d",
            hello.stream_id,
            hello.job,
            hello.run_id,
            hello.host,
            hello.pid,
            self.writer.last_seq,
        )
        return self.writer.last_seq

    def batch(self, batch: pb.Batch) -> int:
        if self.writer is None:
            raise FailedPrecondition("batch before hello")
        assert self.hello_msg is not None
        if batch.clock_updated:  # readers move later times by the fresh offset
            self._shift = record_shift(self.hello_msg) - self.hello_msg.clock_offset_ns
            self._shift += batch.clock_offset_ns
        stats = check_batch(batch, self._shift)
        try:
            written = self.writer.append(batch, (stats.first_start_ns, stats.last_end_ns))
        except OSError as exc:
            raise StorageUnavailable(f"cannot store batch {batch.seq}: {exc}") from exc
        self.store.count_bytes(written)
        if written:
            self.records += stats.records
        else:
            self.duplicates += 1
        if self.metrics is not None:
            if written:
                self.metrics.batch_stored(stats.records, written)
            else:
                self.metrics.duplicate_ignored()
            if batch.dropped > self._dropped_seen:
                self.metrics.dropped_reported("queue", batch.dropped - self._dropped_seen)
        if self.live is not None:
            if written:
                self.live.batch_stored(batch)
            self.live.dropped("queue", batch.dropped - self._dropped_seen)
        self._dropped_seen = max(self._dropped_seen, batch.dropped)
        return self.writer.last_seq

    def goodbye(self, goodbye: pb.Goodbye) -> None:
        if self.writer is None:
            raise FailedPrecondition("goodbye before hello")
        check_goodbye(goodbye)
        try:
            self.writer.finish(goodbye)
        except OSError as exc:
            raise StorageUnavailable(f"cannot store goodbye: {exc}") from exc
        if self.metrics is not None:
            self.metrics.dropped_reported("queue", goodbye.dropped_queue - self._dropped_seen)
            self.metrics.dropped_reported("tracer", goodbye.dropped_tracer)
            self.metrics.dropped_reported("relay", goodbye.dropped_relay)
        if self.live is not None:
            self.live.dropped("queue", goodbye.dropped_queue - self._dropped_seen)
            self.live.dropped("tracer", goodbye.dropped_tracer)
            self.live.dropped("relay", goodbye.dropped_relay)
        self._dropped_seen = max(self._dropped_seen, goodbye.dropped_queue)
        assert self.hello_msg is not None
        log.info(
            "stream %s of job %s finished: %d records stored, %d duplicate batches ignored",
            self.hello_msg.stream_id,
            self.hello_msg.job,
            self.records,
            self.duplicates,
        )

    def close(self) -> None:
        if self.writer is not None:
            writer, self.writer = self.writer, None
            writer.close(self)
            if self.metrics is not None:
                self.metrics.stream_closed()
        if self.live is not None:
            self.live.close()
