"""A stream's calls to the collector: the hello, the window of batches in flight, the
acknowledgements, and reconnecting with backoff (with jitter) until delivered.

``StreamCalls`` is the connection half of ``delivery.StreamDelivery``.
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
from tfprof.agent.relay.spool import SpoolFile
from tfprof.proto import collector_pb2 as pb

# One logger for the whole delivery of a stream.
log = logging.getLogger("tfprof.agent.relay.delivery")

WINDOW = 32  # batches in flight per stream before waiting for acknowledgements
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
class BatchEntry:
    seq: int
    records: int
    data: bytes | None  # None: the bytes are in the spool file at ``offset``
    offset: int = -1
    samples: int = 0  # Python stack samples (a stacks batch): lost ones are counted apart


class StreamCalls:
    """The connection half of ``StreamDelivery``, which sets the state declared here."""

    client: CollectorClient
    hello: pb.Hello
    _on_failure: Callable[[str], None] | None
    _on_captures: Callable[[list[pb.CaptureWindow]], object] | None
    _cond: threading.Condition
    _pending: collections.deque[BatchEntry]
    _pending_memory: int
    _inflight: collections.OrderedDict[int, BatchEntry]
    _spool_file: SpoolFile | None
    acked_seq: int
    records_acked: int
    connected: bool
    last_error: str | None
    _goodbye: pb.Goodbye | None
    _finishing: bool
    _goodbye_sent: bool
    _done: bool
    _abandon: bool
    _fatal: bool
    _busy: bool
    _failed_since_finish: int
    _last_progress: float

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
                if self._finishing and not self._failed_since_finish:
                    continue  # the job ended: one fresh attempt at once decides
                # Jitter: streams refused together (a collector restart, its stream limit)
                # do not all come back at the same instant.
                self._cond.wait(random.uniform(backoff / 2, backoff))
            backoff = min(backoff * 2, BACKOFF_MAX_S)
        self._release_spool_if_delivered()

    def _one_call(self) -> bool:
        """Run one Stream call until it ends; True when it ended cleanly."""
        with self._cond:
            fresh = self._finishing  # begun after the job ended
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
                if fresh:
                    self._failed_since_finish += 1
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

    def _load_locked(self, entry: BatchEntry) -> bytes:
        if entry.data is not None:
            return entry.data
        assert self._spool_file is not None
        return self._spool_file.read(entry.offset)

    def _forget_locked(self, entry: BatchEntry) -> None:
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

    def _release_spool_if_delivered(self) -> None:
        with self._cond:
            if self._done and self._spool_file is not None:
                self._spool_file.remove()
                self._spool_file = None
