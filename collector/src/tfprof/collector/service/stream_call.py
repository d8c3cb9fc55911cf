"""One Stream call: hello, batches, goodbye, in order, each stored in the pool.

What a call may do is settled at its hello: the token's scope must allow the stream's
job and host (service/tokens.py), and the stream's secret must match the one the stream
was opened with (store/stream_secret.py). A resume of the same stream on a newer call
(the agent reconnected while its old call was still being torn down) ends this call
with ``ABORTED`` at once, so it never holds the stream's log open after the newer call's
goodbye. Each batch's decoded size (its records as the lake holds them) is checked
against ``--max-inflight-bytes`` before anything of it is validated or stored.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, TypeVar

from tfprof.collector.errors import InvalidArgument, PermissionDenied, Superseded, TooLarge
from tfprof.collector.service.ingest import IngestStream
from tfprof.collector.service.messages import (
    OVERSIZE_HEADROOM,
    HelloTimeout,
    parse_agent_message,
)
from tfprof.collector.service.rpc_table import Malformed
from tfprof.collector.service.streams_registry import LiveStream, identity_of
from tfprof.collector.service.validate import HOST_FIELDS, RECORD_FIELDS
from tfprof.core.errors import TfprofError
from tfprof.proto import collector_pb2 as pb

if TYPE_CHECKING:
    from tfprof.collector.service.servicer import CollectorServicer, Context

log = logging.getLogger("tfprof.collector.service.server")
T = TypeVar("T")


def decoded_bytes(batch: pb.Batch) -> int:
    """What a batch holds once decoded as the lake stores it: 8 bytes for every column
    of every record and host sample (an empty column included: the lake stores it as
    zeros), and its names. The wire can be 20 times smaller (one-byte varints, empty
    columns), so this, not the message size, is what parsing and compaction hold."""
    records = len(batch.records.kind)
    samples = len(batch.host.time_ns)
    names = sum(len(s) for s in batch.strings)
    return 8 * (records * len(RECORD_FIELDS) + samples * len(HOST_FIELDS)) + names


class StreamCall:
    def __init__(self, servicer: CollectorServicer, context: Context) -> None:
        self.servicer = servicer
        self.context = context
        self.scope = servicer.scope(context)
        self.ingest = IngestStream(servicer.store, servicer.metrics, servicer.access.redact)
        self.live: LiveStream | None = None
        self._write_lock = asyncio.Lock()
        self._storing: Future[Any] | None = None
        self._pushes: set[asyncio.Task[None]] = set()
        self._reader: asyncio.Task[None] | None = None
        self._superseded = False

    async def run(self, requests: AsyncIterator[bytes | Malformed]) -> None:
        servicer = self.servicer
        self._reader = asyncio.ensure_future(self._read(requests))
        try:
            await self._reader
        except TfprofError as exc:
            await servicer.abort(self.context, exc)
        except asyncio.CancelledError:
            if self._superseded:
                await servicer.abort(
                    self.context,
                    Superseded("this stream was resumed on a newer call of its agent"),
                )
            # The call ended under us: the client went away or its deadline passed, gRPC
            # refused a message far over the size limit, or the server is stopping;
            # either way what was acknowledged is stored.
            servicer.metrics.request_error("CANCELLED")
            log.warning(
                "stream %s ended by the client or gRPC (cancelled, deadline, or a message "
                "over %d bytes) after %d records",
                self.ingest.hello_msg.stream_id if self.ingest.hello_msg else "(before hello)",
                servicer.limits.max_message_bytes + OVERSIZE_HEADROOM,
                self.ingest.records,
            )
            raise
        finally:
            if self._reader is not None and not self._reader.done():
                self._reader.cancel()
            await self._end()

    async def _read(self, requests: AsyncIterator[bytes | Malformed]) -> None:
        timeout = self.servicer.limits.hello_timeout_s
        messages = aiter(requests)
        try:
            try:
                first = await asyncio.wait_for(anext(messages), timeout)
            except TimeoutError:
                raise HelloTimeout(f"no hello within {timeout:g} s (--hello-timeout)") from None
            await self._handle(first)
            async for message in messages:
                await self._handle(message)
        except StopAsyncIteration:
            pass  # the agent closed its side without a message

    def _supersede(self) -> None:
        """Called from the storage pool: a newer call resumed this stream."""
        loop = self._reader.get_loop() if self._reader is not None else None
        if loop is None:
            return

        def end() -> None:
            self._superseded = True
            # Never cut an ack's write short (gRPC would take the status that follows
            # for a second operation at once): a write in progress ends first.
            if self._reader is not None and not self._write_lock.locked():
                self._reader.cancel()

        loop.call_soon_threadsafe(end)

    async def _handle(self, message: bytes | Malformed) -> None:
        if isinstance(message, Malformed):
            raise message.exception()
        budget = self.servicer.budget
        await budget.acquire(len(message))
        try:
            kind, seq = await self._store(self._ingest, message)
        finally:
            budget.release(len(message))
        if kind != "goodbye":
            await self._write(pb.Ack(seq=seq))
        if kind == "hello":
            assert self.ingest.hello_msg is not None
            self.live = LiveStream(identity_of(self.ingest.hello_msg), self.push)
            self.servicer.on_hello(self.live)

    def _ingest(self, data: bytes) -> tuple[str, int]:
        """In the storage pool: parse one message and store it; (its kind, the ack)."""
        message = parse_agent_message(data)
        which = message.WhichOneof("msg")
        if which == "hello":
            hello = message.hello
            why = self.scope.allows_stream(hello.job, hello.host)
            if why is not None:
                raise PermissionDenied(f"stream of job {hello.job} on {hello.host}: {why}")
            return which, self.ingest.hello(hello, self._supersede)
        if which == "batch":
            size, limit = decoded_bytes(message.batch), self.servicer.budget.limit
            if size > limit:
                raise TooLarge(
                    f"batch {message.batch.seq} decodes to {size:,} bytes, over this "
                    f"collector's limit of {limit:,} (--max-inflight-bytes): nothing of it "
                    "is stored; send fewer records per batch"
                )
            return which, self.ingest.batch(message.batch)
        if which == "goodbye":
            self.ingest.goodbye(message.goodbye)
            return which, 0
        raise InvalidArgument("empty agent message")

    async def _store(self, fn: Callable[[bytes], T], data: bytes) -> T:
        future = self.servicer.storage.submit(fn, data)
        self._storing = future
        return await asyncio.wrap_future(future)

    async def _write(self, ack: pb.Ack) -> None:
        async with self._write_lock:
            await self.context.write(ack)
        if self._superseded and self._reader is not None:
            self._reader.cancel()

    def push(self, window: pb.CaptureWindow) -> None:
        """Send ``window`` down this stream as soon as the response side is free."""
        task = asyncio.ensure_future(self._push(window))
        self._pushes.add(task)
        task.add_done_callback(self._pushes.discard)

    async def _push(self, window: pb.CaptureWindow) -> None:
        try:
            await self._write(pb.Ack(captures=[window]))
        except Exception as exc:  # the call ended first: the agent reconnects and gets it
            log.debug("capture %s not sent: %s", window.capture_id, exc)

    async def _end(self) -> None:
        self.servicer.registry.discard(self.live)
        for task in list(self._pushes):
            task.cancel()
        # A batch being stored when the call was cancelled finishes before the close.
        storing = self._storing
        if storing is not None and not storing.done():
            try:
                await asyncio.wrap_future(storing)
            except Exception:
                pass  # its error no longer has a caller to go to
        await asyncio.wrap_future(self.servicer.storage.submit(self.ingest.close))
