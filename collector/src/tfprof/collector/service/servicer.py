"""The Collector service on ``grpc.aio``: a thin adapter from protos to ``IngestStream``
and the capture registry.

Every call is a coroutine on the server's one event loop, so an idle stream costs a
coroutine, not a thread. Storing a batch (parse, validate, append, fdatasync) blocks, so
it runs in a bounded thread pool; a stream awaits its own batch before it reads the next
one (a stream's batches are never reordered) while other streams' acks go on. The bytes
being parsed and stored at once are bounded (``ByteBudget``): past it, streams wait
before reading, and HTTP/2 flow control holds their agents back. Clock, health and
capture calls never wait on ingest.

Domain errors (the collector's and the shared core's, e.g. a bad job name) become status
codes here and nowhere else, through one table. Requests are parsed leniently and
Stream messages arrive as raw bytes, parsed in the pool (service/rpc_table.py, which
also says why the handler table is built from collector.proto's descriptor rather than
by the generated ``add_CollectorServicer_to_server``).

Exports (``Export``) run in a child process each (service/export_stream.py), at most
``MAX_EXPORTS`` at once: reading and merging stored records never holds the event loop,
the ingest pool or the server's memory.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

import grpc
import grpc.aio
from google.protobuf.message import DecodeError

from tfprof.collector.errors import (
    CollectorError,
    Conflict,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    StorageUnavailable,
    TooLarge,
    Unsupported,
)
from tfprof.collector.service import capture_windows, export_stream
from tfprof.collector.service.byte_budget import ByteBudget
from tfprof.collector.service.ingest import IngestStream
from tfprof.collector.service.live_figures import live_reply
from tfprof.collector.service.metrics import CollectorMetrics
from tfprof.collector.service.rpc_table import SERVICE_NAME, Malformed, handler_table
from tfprof.collector.service.streams_registry import LiveStream, StreamRegistry, identity_of
from tfprof.collector.store import Store
from tfprof.core.errors import InputError, TfprofError
from tfprof.proto import collector_pb2 as pb

log = logging.getLogger("tfprof.collector.service.server")

__all__ = ["OVERSIZE_HEADROOM", "SERVICE_NAME", "CollectorServicer", "Limits", "status_for"]

# gRPC itself refuses messages this far over the limit before Python sees them (a memory
# bound); up to there our deserializer does, so the refusal is logged and counted.
OVERSIZE_HEADROOM = 1 << 20
MAX_EXPORTS = 2  # export children at once; more callers are told to retry
T = TypeVar("T")


class Busy(CollectorError):
    """This collector holds as many streams (--max-streams) or runs as many exports as it
    may: retry later."""


class HelloTimeout(CollectorError):
    """A stream that did not say hello in time (--hello-timeout)."""


_STATUS: dict[type[TfprofError], grpc.StatusCode] = {
    InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
    Unsupported: grpc.StatusCode.UNIMPLEMENTED,
    NotFound: grpc.StatusCode.NOT_FOUND,
    Conflict: grpc.StatusCode.ABORTED,
    StorageUnavailable: grpc.StatusCode.UNAVAILABLE,
    TooLarge: grpc.StatusCode.RESOURCE_EXHAUSTED,
    Busy: grpc.StatusCode.RESOURCE_EXHAUSTED,
    HelloTimeout: grpc.StatusCode.DEADLINE_EXCEEDED,
    # The shared core's input errors (InvalidName, TrackKeyError, ...); after the
    # collector's own, which are searched first.
    InputError: grpc.StatusCode.INVALID_ARGUMENT,
}


def status_for(exc: TfprofError) -> grpc.StatusCode:
    if isinstance(exc, export_stream.ExportFailed):  # the child's own status_for named it
        return exc.code
    for kind, code in _STATUS.items():
        if isinstance(exc, kind):
            return code
    return grpc.StatusCode.INTERNAL


def _parse_agent_message(data: bytes) -> pb.AgentMessage:
    try:
        return pb.AgentMessage.FromString(data)
    except DecodeError as exc:
        raise InvalidArgument(f"malformed AgentMessage: {exc or 'cannot parse'}") from None


@dataclass(frozen=True)
class Limits:
    max_message_bytes: int
    max_streams: int
    hello_timeout_s: float


Context = grpc.aio.ServicerContext[object, object]


class CollectorServicer:
    def __init__(
        self,
        store: Store,
        metrics: CollectorMetrics,
        limits: Limits,
        budget: ByteBudget,
        storage: ThreadPoolExecutor,
        control: ThreadPoolExecutor,
        capture_log: capture_windows.CaptureLog,
    ) -> None:
        self.store = store
        self.metrics = metrics
        self.limits = limits
        self.budget = budget
        self.storage = storage
        self.control = control
        self.capture_log = capture_log
        self.registry = StreamRegistry()
        self.exports = 0  # Export calls running now
        # Windows still open after a restart reach the streams that reconnect.
        self.open_captures = capture_windows.still_open(capture_log.read(), time.time_ns())

    async def Stream(self, requests: AsyncIterator[bytes | Malformed], context: Context) -> None:
        if self.registry.calls >= self.limits.max_streams:
            await self.abort(
                context,
                Busy(
                    f"this collector holds its limit of {self.limits.max_streams} streams "
                    "(--max-streams); retry later"
                ),
            )
        self.registry.calls += 1
        try:
            await StreamCall(self, context).run(requests)
        finally:
            self.registry.calls -= 1

    async def Clock(self, request: pb.ClockRequest | Malformed, context: Context) -> pb.ClockReply:
        if isinstance(request, Malformed):
            await self.abort(context, request.exception())
        t2 = time.time_ns()
        return pb.ClockReply(t1_ns=request.t1_ns, t2_ns=t2, t3_ns=time.time_ns())

    async def StartCapture(
        self, request: pb.CaptureRequest | Malformed, context: Context
    ) -> pb.CaptureReply:
        try:
            if isinstance(request, Malformed):
                raise request.exception()
            capture_windows.check_request(request)
            now = time.time_ns()
            capture = capture_windows.new_capture(request, now)
            targets = [s for s in self.registry if capture_windows.matches(request, s.identity)]
            if not targets:
                raise capture_windows.no_match(request, len(self.registry))
            capture.streams.extend(s.identity for s in targets)
            try:  # durable before any agent acts on it
                await self._control(self.capture_log.append, capture)
            except OSError as exc:
                raise StorageUnavailable(f"cannot record the capture: {exc}") from exc
        except TfprofError as exc:
            await self.abort(context, exc)
        window = capture_windows.window_of(capture)
        for stream in targets:
            stream.push(window)
        self.open_captures = [*capture_windows.still_open(self.open_captures, now), capture]
        log.info(
            "capture %s: %d stream(s) of %s from %d for %.3f s",
            capture.capture_id,
            len(targets),
            capture_windows.describe_targets(request),
            capture.start_ns,
            capture.duration_ns / 1e9,
        )
        return pb.CaptureReply(capture=capture)

    async def ListCaptures(
        self, request: pb.ListCapturesRequest | Malformed, context: Context
    ) -> pb.ListCapturesReply:
        if isinstance(request, Malformed):
            await self.abort(context, request.exception())
        return pb.ListCapturesReply(captures=await self._control(self.capture_log.read))

    async def LiveFigures(
        self, request: pb.LiveFiguresRequest | Malformed, context: Context
    ) -> pb.LiveFiguresReply:
        if isinstance(request, Malformed):
            await self.abort(context, request.exception())
        return live_reply(self.metrics.live.snapshot())

    async def Export(
        self, request: pb.ExportRequest | Malformed, context: Context
    ) -> AsyncIterator[pb.ExportChunk]:
        try:
            if isinstance(request, Malformed):
                raise request.exception()
            export_stream.check_request(request)
            if self.exports >= MAX_EXPORTS:
                raise Busy(f"this collector is writing {self.exports} exports; retry later")
        except TfprofError as exc:
            await self.abort(context, exc)
        self.exports += 1
        try:
            async for chunk in export_stream.exported(str(self.store.root), request):
                yield chunk
        except TfprofError as exc:
            await self.abort(context, exc)
        finally:
            self.exports -= 1

    def on_hello(self, stream: LiveStream) -> None:
        """A stream said hello: make it reachable, and send it the windows still open."""
        self.registry.add(stream)
        for capture in capture_windows.still_open(self.open_captures, time.time_ns()):
            if capture_windows.matches(capture.request, stream.identity):
                stream.push(capture_windows.window_of(capture))

    async def _control(self, fn: Callable[..., T], *args: object) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.control, fn, *args)

    async def abort(self, context: Context, exc: TfprofError) -> NoReturn:
        code = status_for(exc)
        self.metrics.request_error(code.name)
        log.warning("rejected call from %s: %s: %s", context.peer(), code.name, exc)
        await context.abort(code, str(exc))
        raise AssertionError("context.abort returned")  # it raises

    def handlers(self) -> grpc.GenericRpcHandler[object, object]:
        return handler_table(self, self.limits.max_message_bytes)


class StreamCall:
    """One Stream call: hello, batches, goodbye, in order, each stored in the pool."""

    def __init__(self, servicer: CollectorServicer, context: Context) -> None:
        self.servicer = servicer
        self.context = context
        self.ingest = IngestStream(servicer.store, servicer.metrics)
        self.live: LiveStream | None = None
        self._write_lock = asyncio.Lock()
        self._storing: Future[Any] | None = None
        self._pushes: set[asyncio.Task[None]] = set()

    async def run(self, requests: AsyncIterator[bytes | Malformed]) -> None:
        servicer = self.servicer
        messages = aiter(requests)
        try:
            try:
                first = await asyncio.wait_for(anext(messages), servicer.limits.hello_timeout_s)
            except TimeoutError:
                raise HelloTimeout(
                    f"no hello within {servicer.limits.hello_timeout_s:g} s (--hello-timeout)"
                ) from None
            await self._handle(first)
            async for message in messages:
                await self._handle(message)
        except StopAsyncIteration:
            pass  # the agent closed its side without a message
        except TfprofError as exc:
            await servicer.abort(self.context, exc)
        except asyncio.CancelledError:
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
            await self._end()

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
        message = _parse_agent_message(data)
        which = message.WhichOneof("msg")
        if which == "hello":
            return which, self.ingest.hello(message.hello)
        if which == "batch":
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
