"""Delivering one traced process's stream: in order, exactly once on the collector.

Runs in the launcher, never in the user's process. Each stream delivers its batches in
sequence order and keeps every batch until the collector acknowledges it; when the
collector is unreachable, slow or busy it reconnects with backoff (with jitter) and
spills to the on-disk spool (read back and sent once it answers again), and what is
still undelivered when the job ends stays in the spool for ``tfprof-agent
flush-spool``. The collector ignores sequence numbers it already stored, so resending
after a reconnect never duplicates a record.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable

from tfprof.agent.relay.collector_client import CollectorClient
from tfprof.agent.relay.delivery_call import BatchEntry, StreamCalls
from tfprof.agent.relay.spool import Spool, SpoolFile, keep_leftovers
from tfprof.proto import collector_pb2 as pb

log = logging.getLogger("tfprof.agent.relay.delivery")

MEMORY_BYTES = 64 << 20  # unsent batches a stream keeps in memory before spilling
DOWN_AFTER_CALLS = 2  # calls begun after the job ended that fail before it spools


class StreamDelivery(StreamCalls):
    """Delivers one stream, in order, exactly once on the collector, or spools it."""

    def __init__(
        self,
        client: CollectorClient,
        hello: pb.Hello,
        spool: Spool | None = None,
        on_failure: Callable[[str], None] | None = None,
        memory_bytes: int = MEMORY_BYTES,
        next_seq: int = 1,
        on_captures: Callable[[list[pb.CaptureWindow]], object] | None = None,
    ) -> None:
        self.client = client
        self.hello = hello
        self.spool = spool
        self._on_failure = on_failure
        self._on_captures = on_captures  # capture windows the collector sends on acks
        self._memory_limit = memory_bytes
        self._cond = threading.Condition()
        self._pending: collections.deque[BatchEntry] = collections.deque()
        self._pending_memory = 0
        self._inflight: collections.OrderedDict[int, BatchEntry] = collections.OrderedDict()
        self._spool_file: SpoolFile | None = None
        self._next_seq = next_seq
        self.acked_seq = 0
        self.records_acked = 0
        self.dropped = 0  # records lost for good (spool full: its limit or the disk)
        self.dropped_samples = 0  # stack samples lost so (they are not records)
        self.spooled_records = 0  # records left in the spool when the job ended
        self.connected = False
        self.last_error: str | None = None
        self._goodbye: pb.Goodbye | None = None
        self._finishing = False
        self._goodbye_sent = False  # the goodbye (if any) and the end of the call
        self._done = False  # goodbye acknowledged, or abandoned
        self._abandon = False
        self._fatal = False
        self._busy = False  # the last call was refused by a collector at its stream limit
        self._failed_since_finish = 0  # calls begun after finish() that failed
        self._last_progress = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="tfprof-stream", daemon=True)
        self._thread.start()

    # -- producer side --------------------------------------------------------------

    def send(self, message: pb.AgentMessage, records: int, samples: int = 0) -> bool:
        """Queue ``message.batch`` (never blocks for the network). False if dropped.

        The batch is built inside its AgentMessage and serialized once, here: what is
        kept, spooled and sent is those bytes.
        """
        with self._cond:
            if self._finishing:  # a straggler after the goodbye: counted, not sent
                self.dropped += records
                self.dropped_samples += samples
                return False
            message.batch.seq = self._next_seq
            self._next_seq += 1
            data = message.SerializeToString()
            kept = self._enqueue_locked(message.batch.seq, data, records, samples)
            if not kept:
                # Numbers go only to kept batches: the collector refuses a sequence that
                # jumps, so a stream's sequence has no gaps of our making.
                self._next_seq -= 1
            return kept

    def resume(self, messages: list[bytes]) -> int:
        """Queue already-sequenced batches (read back from a spool), in memory; returns
        the records they hold."""
        total = 0
        with self._cond:
            for data in messages:
                batch = pb.AgentMessage.FromString(data).batch
                records = len(batch.records.kind)
                total += records
                self._pending.append(
                    BatchEntry(batch.seq, records, data, -1, len(batch.stacks.stack))
                )
                self._pending_memory += len(data)
                self._next_seq = max(self._next_seq, batch.seq + 1)
            self._cond.notify_all()
        return total

    def _enqueue_locked(self, seq: int, data: bytes, records: int, samples: int = 0) -> bool:
        spilling = self._pending and self._pending[-1].data is None
        if not spilling and self._pending_memory + len(data) <= self._memory_limit:
            self._pending.append(BatchEntry(seq, records, data, -1, samples))
            self._pending_memory += len(data)
            self._cond.notify_all()
            return True
        # Slow or unreachable collector: keep order, spill to disk.
        offset = self._spill_locked(data)
        if offset is None:
            self.dropped += records
            self.dropped_samples += samples
            return False
        self._pending.append(BatchEntry(seq, records, None, offset, samples))
        self._cond.notify_all()
        return True

    def _spill_locked(self, data: bytes) -> int | None:
        if self.spool is None:
            return None
        if self._spool_file is None:
            try:
                self._spool_file = self.spool.open_stream(self.hello, self.client.target)
            except OSError as exc:
                log.warning("cannot open the spool in %s: %s", self.spool.root, exc)
                self.spool = None
                return None
        try:
            return self._spool_file.append(data)
        except OSError as exc:  # disk full: drop and count
            log.warning("cannot write to the spool: %s", exc)
            return None

    # -- the end ----------------------------------------------------------------------

    def finish(self, goodbye: pb.Goodbye | None, timeout: float) -> bool:
        """Say goodbye and wait for delivery; spool what is left. True if delivered.

        ``goodbye=None`` ends the stream without one (a spooled stream whose launcher
        died: the collector keeps it as incomplete).
        """
        with self._cond:
            if goodbye is not None:
                goodbye.dropped_relay += self.dropped
                goodbye.dropped_stack_samples += self.dropped_samples
            self._goodbye = goodbye
            self._finishing = True
            self._cond.notify_all()  # also cuts a reconnect backoff short
            deadline = time.monotonic() + timeout
            while not self._done:
                left = deadline - time.monotonic()
                # Calls begun after the job ended failed: the collector is down, so spool
                # now rather than keep the user waiting. Two, not one: the first may meet
                # the connection a restarting collector is still tearing down (GOAWAY).
                # (A call begun earlier may fail for a collector that has since come
                # back.) A busy one (at its stream limit) is up: keep trying until the
                # timeout.
                down = not self.connected and self._failed_since_finish >= DOWN_AFTER_CALLS
                down = down and not self._busy
                if left <= 0 or down or self._fatal:
                    break
                self._cond.wait(min(left, 0.1))
            if self._done:
                return True
            self._abandon = True
            self._cond.notify_all()
        self._thread.join(10.0)
        self._spool_leftovers()
        return False

    def _spool_leftovers(self) -> None:
        """Keep what is undelivered in the spool; count what cannot be kept as dropped
        (the spool's limit, or a full disk) and record that count in the goodbye."""
        with self._cond:
            self._requeue_inflight_locked()
            entries = [e for e in self._pending if e.seq > self.acked_seq]
            if self.spool is None:
                self.dropped += sum(e.records for e in entries)
                self.dropped_samples += sum(e.samples for e in entries)
                return
            kept: list[BatchEntry] = []
            try:
                if self._spool_file is None:
                    self._spool_file = self.spool.open_stream(self.hello, self.client.target)
            except OSError as exc:
                log.warning("cannot spool undelivered batches: %s", exc)
            if self._spool_file is not None:
                kept = keep_leftovers(self._spool_file, entries, self._goodbye)
                self._spool_file = None
            self.spooled_records = sum(e.records for e in kept)
            self.dropped += sum(e.records for e in entries) - self.spooled_records
            self.dropped_samples += sum(e.samples for e in entries)
            self.dropped_samples -= sum(e.samples for e in kept)
