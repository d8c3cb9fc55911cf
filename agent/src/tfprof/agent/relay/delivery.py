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
import queue
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

import grpc

from tfprof.agent.relay.collector_client import (
    BACKOFF_MAX_S,
    CollectorClient,
    describe,
    refused_for_size,
)
from tfprof.agent.relay.spool import Spool, SpoolFile, keep_leftovers
from tfprof.proto import collector_pb2 as pb

log = logging.getLogger("tfprof.agent.relay.delivery")

WINDOW = 32  # batches in flight per stream before waiting for acknowledgements
MEMORY_BYTES = 64 << 20  # unsent batches a stream keeps in memory before spilling
BACKOFF_START_S = 0.1
STALL_S = 15.0  # no acknowledgement for this long with batches in flight: reconnect
CONNECT_S = 5.0  # a call whose hello is not acknowledged by then has failed
# Errors a retry cannot fix; what is undelivered goes to the spool at the end.
# RESOURCE_EXHAUSTED is one of them only for a batch over the collector's size limit
# (``client.refused_for_size``); a collector at its stream limit is busy, not broken: the
# stream retries with backoff (UNAVAILABLE, DEADLINE_EXCEEDED and the rest too).
FATAL_CODES = {
    grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.UNIMPLEMENTED,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.OUT_OF_RANGE,  # a sequence jump: resending the same cannot help
    grpc.StatusCode.ALREADY_EXISTS,  # another call holds our stream id without our secret
}
_END = object()


class _AckStream(Protocol):
    """What we use of a Stream call: its acknowledgements, and cancelling it (grpc-stubs
    declares ``cancel`` untyped, so the call is seen through this protocol)."""

    def __iter__(self) -> Iterator[pb.Ack]: ...

    def cancel(self) -> object: ...


@dataclass
class _Entry:
    seq: int
    records: int
    data: bytes | None  # None: the bytes are in the spool file at ``offset``
    offset: int = -1
    samples: int = 0  # Python stack samples (a stacks batch): lost ones are counted apart


class StreamDelivery:
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
        self._pending: collections.deque[_Entry] = collections.deque()
        self._pending_memory = 0
        self._inflight: collections.OrderedDict[int, _Entry] = collections.OrderedDict()
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
        self._failed_calls = 0
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
                self._pending.append(_Entry(batch.seq, records, data, -1, len(batch.stacks.stack)))
                self._pending_memory += len(data)
                self._next_seq = max(self._next_seq, batch.seq + 1)
            self._cond.notify_all()
        return total

    def _enqueue_locked(self, seq: int, data: bytes, records: int, samples: int = 0) -> bool:
        spilling = self._pending and self._pending[-1].data is None
        if not spilling and self._pending_memory + len(data) <= self._memory_limit:
            self._pending.append(_Entry(seq, records, data, -1, samples))
            self._pending_memory += len(data)
            self._cond.notify_all()
            return True
        # Slow or unreachable collector: keep order, spill to disk.
        offset = self._spill_locked(data)
        if offset is None:
            self.dropped += records
            self.dropped_samples += samples
            return False
        self._pending.append(_Entry(seq, records, None, offset, samples))
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

    # -- the connection ---------------------------------------------------------------

    def _requests(self, outbox: queue.Queue[object]) -> Iterator[bytes]:
        while True:
            item = outbox.get()
            if item is _END:
                return
            assert isinstance(item, bytes)
            yield item

    def _run(self) -> None:
        backoff = BACKOFF_START_S
        while True:
            with self._cond:
                if self._done or self._abandon:
                    break
                if self._fatal:
                    self._cond.wait(0.5)  # nothing to retry; finish() spools
                    continue
            if self._one_call():
                with self._cond:
                    if self._done:
                        break
                backoff = BACKOFF_START_S
                continue
            with self._cond:
                if self._abandon:
                    break
                # Jitter: streams refused together (a collector restart, its stream limit)
                # do not all come back at the same instant.
                self._cond.wait(random.uniform(backoff / 2, backoff))
            backoff = min(backoff * 2, BACKOFF_MAX_S)
        self._release_spool_if_delivered()

    def _one_call(self) -> bool:
        """Run one Stream call until it ends; True when it ended cleanly."""
        outbox: queue.Queue[object] = queue.Queue()
        outbox.put(pb.AgentMessage(hello=self.hello).SerializeToString())
        # wait_for_ready: a call waits for the channel's own reconnection (a collector
        # that restarts) instead of failing at once; CONNECT_S bounds the wait.
        call: _AckStream = self.client.stream(
            self._requests(outbox), metadata=self.client.metadata, wait_for_ready=True
        )
        acks = threading.Thread(target=self._read_acks, args=(call,), daemon=True)
        acks.start()
        hello_acked = stalled = False
        try:
            with self._cond:
                # The collector answers the hello with the last sequence it stored.
                connect_deadline = time.monotonic() + CONNECT_S
                while not self.connected and acks.is_alive() and not self._abandon:
                    if time.monotonic() > connect_deadline:
                        if self.last_error is None:
                            self.last_error = "UNAVAILABLE: no answer from the collector"
                            if self._on_failure is not None:
                                self._on_failure(self.last_error)
                        break
                    self._cond.wait(0.1)
                hello_acked = self.connected
                self._last_progress = time.monotonic()
                while hello_acked and self.connected and not self._abandon:
                    self._fill_window_locked(outbox)
                    if self._goodbye_sent and not self._inflight:
                        break
                    if self._inflight and time.monotonic() - self._last_progress > STALL_S:
                        self.last_error = "the collector stopped acknowledging"
                        break
                    self._cond.wait(0.2)
                stalled = hello_acked and self.last_error is not None
        finally:
            outbox.put(_END)
        if self._abandon or stalled or not hello_acked:
            call.cancel()
        acks.join()
        with self._cond:
            clean = self.last_error is None and self._goodbye_sent and not self._inflight
            if clean:
                self._done = True
            else:
                self._requeue_inflight_locked()
                self._goodbye_sent = False
                self._failed_calls += 1
            self.connected = False
            self._cond.notify_all()
        return clean

    def _fill_window_locked(self, outbox: queue.Queue[object]) -> None:
        while self._pending and len(self._inflight) < WINDOW:
            entry = self._pending.popleft()
            if entry.seq <= self.acked_seq:
                self._forget_locked(entry)
                continue
            data = self._load_locked(entry)
            self._inflight[entry.seq] = entry
            outbox.put(data)
        if self._finishing and not self._pending and not self._goodbye_sent:
            if self._goodbye is not None:
                outbox.put(pb.AgentMessage(goodbye=self._goodbye).SerializeToString())
            outbox.put(_END)
            self._goodbye_sent = True

    def _load_locked(self, entry: _Entry) -> bytes:
        if entry.data is not None:
            return entry.data
        assert self._spool_file is not None
        return self._spool_file.read(entry.offset)

    def _forget_locked(self, entry: _Entry) -> None:
        if entry.data is not None:
            self._pending_memory -= len(entry.data)

    def _requeue_inflight_locked(self) -> None:
        # Unacknowledged batches go back to the front, in order, for the next call.
        for entry in reversed(self._inflight.values()):
            self._pending.appendleft(entry)
        self._inflight.clear()

    def _read_acks(self, call: _AckStream) -> None:
        error: str | None = None
        cancelled = False
        code: grpc.StatusCode | None = None
        try:
            for ack in call:
                with self._cond:
                    if not self.connected:
                        self.connected = True
                        self.last_error = None
                        self._busy = False
                    # An ack that only carries capture windows (seq 0, or no newer
                    # seq) acknowledges nothing and is no progress.
                    if ack.seq > self.acked_seq or not ack.captures:
                        self._last_progress = time.monotonic()
                    self.acked_seq = max(self.acked_seq, ack.seq)
                    while self._inflight:
                        seq, entry = next(iter(self._inflight.items()))
                        if seq > self.acked_seq:
                            break
                        del self._inflight[seq]
                        self.records_acked += entry.records
                        self._forget_locked(entry)
                    self._cond.notify_all()
                if ack.captures:
                    self._forward_captures(list(ack.captures))
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            error = describe(exc)
            cancelled = code == grpc.StatusCode.CANCELLED
            busy = code == grpc.StatusCode.RESOURCE_EXHAUSTED and not refused_for_size(exc)
        with self._cond:
            if error is not None and cancelled:
                self.connected = False  # we cancelled it ourselves
            elif error is not None and busy:
                self.connected = False  # retried with backoff; not worth a warning
                if not self._busy:
                    log.info("collector busy (%s); retrying with backoff", error)
                self._busy = True
            elif error is not None:
                self._busy = False
                if code in FATAL_CODES or code == grpc.StatusCode.RESOURCE_EXHAUSTED:
                    self._fatal = True
                first = self.last_error is None
                self.last_error = error
                self.connected = False
                if first and self._on_failure is not None and not self._abandon:
                    self._on_failure(error)
            self._cond.notify_all()

    def _forward_captures(self, captures: list[pb.CaptureWindow]) -> None:
        if self._on_captures is None:
            return
        try:
            self._on_captures(captures)
        except Exception:  # a bug of ours must not end delivery
            log.exception("cannot forward capture windows to the traced process")

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
            failed_before = self._failed_calls
            deadline = time.monotonic() + timeout
            while not self._done:
                left = deadline - time.monotonic()
                # A fresh attempt failed since the job ended: the collector is down, so
                # spool now rather than keep the user waiting. A busy one (at its stream
                # limit) is up: keep trying until the timeout.
                down = not self.connected and self._failed_calls > failed_before
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
            kept: list[_Entry] = []
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

    def _release_spool_if_delivered(self) -> None:
        with self._cond:
            if self._done and self._spool_file is not None:
                self._spool_file.remove()
                self._spool_file = None
