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
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import NoReturn, TypeVar

import grpc
import grpc.aio

from tfprof.collector.errors import (
    AlreadyExists,
    Conflict,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    OutOfRange,
    PermissionDenied,
    StorageUnavailable,
    TooLarge,
    Unsupported,
)
from tfprof.collector.service import capture_windows, export_stream
from tfprof.collector.service.auth import Authorizer
from tfprof.collector.service.byte_budget import ByteBudget
from tfprof.collector.service.live_figures import live_reply
from tfprof.collector.service.messages import OVERSIZE_HEADROOM, Busy, HelloTimeout
from tfprof.collector.service.metrics import CollectorMetrics
from tfprof.collector.service.rank_figures import add_ranks
from tfprof.collector.service.rpc_table import SERVICE_NAME, Malformed, handler_table
from tfprof.collector.service.stream_call import StreamCall
from tfprof.collector.service.streams_registry import LiveStream, StreamRegistry
from tfprof.collector.service.tokens import Scope
from tfprof.collector.store import Store
from tfprof.collector.store.capture_log import CaptureLog, matches
from tfprof.core.errors import InputError, TfprofError
from tfprof.core.ratelimit import RateLimitedLog
from tfprof.core.redact import DEFAULT_PATTERNS
from tfprof.proto import collector_pb2 as pb

log = logging.getLogger("tfprof.collector.service.server")

__all__ = ["OVERSIZE_HEADROOM", "SERVICE_NAME", "CollectorServicer", "Limits", "status_for"]

MAX_EXPORTS = 2  # export children at once; more callers are told to retry
T = TypeVar("T")


_STATUS: dict[type[TfprofError], grpc.StatusCode] = {
    InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
    Unsupported: grpc.StatusCode.UNIMPLEMENTED,
    NotFound: grpc.StatusCode.NOT_FOUND,
    Conflict: grpc.StatusCode.ABORTED,
    AlreadyExists: grpc.StatusCode.ALREADY_EXISTS,
    PermissionDenied: grpc.StatusCode.PERMISSION_DENIED,
    OutOfRange: grpc.StatusCode.OUT_OF_RANGE,
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


@dataclass(frozen=True)
class Limits:
    max_message_bytes: int
    max_streams: int
    hello_timeout_s: float


@dataclass(frozen=True)
class Access:
    """Who may do what (docs/operations/security.md): the tokens, and the patterns of
    option names whose values are masked in stored command lines."""

    auth: Authorizer = field(default_factory=Authorizer)
    redact: Sequence[str] = DEFAULT_PATTERNS


Context = grpc.aio.ServicerContext[object, object]

# Peers a collector without tokens takes capture control and exports from: its own host.
LOOPBACK_PEERS = ("ipv4:127.", "ipv6:[::1]", "unix:")


class CollectorServicer:
    def __init__(
        self,
        store: Store,
        metrics: CollectorMetrics,
        limits: Limits,
        budget: ByteBudget,
        storage: ThreadPoolExecutor,
        control: ThreadPoolExecutor,
        capture_log: CaptureLog,
        access: Access | None = None,
    ) -> None:
        self.store = store
        self.access = access or Access()
        # Refused calls by status code: one line per interval each, with the count.
        self._refusal_logs: dict[str, RateLimitedLog] = {}
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

    def scope(self, context: Context) -> Scope:
        """What the call's token allows (the interceptor let only valid ones through)."""
        scope = self.access.auth.scope(context.invocation_metadata())
        return scope if scope is not None else Scope("none")

    def check_control(self, context: Context, what: str) -> None:
        """Capture control and exports: the fleet token's alone; without tokens, this
        host's alone (a capture reply names jobs, hosts, pids and runs of every stream it
        reached; an export is every job's records)."""
        scope = self.scope(context)
        if scope.kind == "admin":
            return
        if scope.kind == "open":
            if context.peer().startswith(LOOPBACK_PEERS):
                return
            raise PermissionDenied(
                f"{what} from {context.peer()}: a collector without tokens takes it from its "
                "own host only (give it --auth-token-file)"
            )
        raise PermissionDenied(f"{what}: a token for {scope} may stream, not {what}")

    async def check_reader(self, context: Context, what: str) -> None:
        """Read-only views (ListCaptures, LiveFigures): open without tokens; with tokens,
        the fleet token's (a job or node token may only stream)."""
        scope = self.scope(context)
        if not scope.unrestricted:
            await self.abort(
                context, PermissionDenied(f"{what}: a token for {scope} may only stream")
            )

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
            self.check_control(context, "StartCapture")
            capture_windows.check_request(request)
            now = time.time_ns()
            capture = capture_windows.new_capture(request, now)
            targets = [s for s in self.registry if matches(request, s.identity)]
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
        await self.check_reader(context, "ListCaptures")
        return pb.ListCapturesReply(captures=await self._control(self.capture_log.read))

    async def LiveFigures(
        self, request: pb.LiveFiguresRequest | Malformed, context: Context
    ) -> pb.LiveFiguresReply:
        if isinstance(request, Malformed):
            await self.abort(context, request.exception())
        await self.check_reader(context, "LiveFigures")
        return add_ranks(live_reply(self.metrics.live.snapshot()), self.metrics.ranks.snapshot())

    async def Export(
        self, request: pb.ExportRequest | Malformed, context: Context
    ) -> AsyncIterator[pb.ExportChunk]:
        try:
            if isinstance(request, Malformed):
                raise request.exception()
            self.check_control(context, "Export")
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
            if matches(capture.request, stream.identity):
                stream.push(capture_windows.window_of(capture))

    async def _control(self, fn: Callable[..., T], *args: object) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.control, fn, *args)

    async def abort(self, context: Context, exc: TfprofError) -> NoReturn:
        code = status_for(exc)
        self.metrics.request_error(code.name)
        # Refusals come by the thousand from a misbehaving client: a line per code per
        # interval, with the count (the metric counts each).
        refusals = self._refusal_logs.get(code.name)
        if refusals is None:
            refusals = self._refusal_logs[code.name] = RateLimitedLog(log)
        refusals.note(f"rejected call from {context.peer()}: {code.name}: {exc}")
        await context.abort(code, str(exc))
        raise AssertionError("context.abort returned")  # it raises

    def handlers(self) -> grpc.GenericRpcHandler[object, object]:
        return handler_table(self, self.limits.max_message_bytes)
