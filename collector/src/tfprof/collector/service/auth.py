"""Bearer-token authentication of the collector's RPCs, as a gRPC server interceptor.

Contract: the agent sends gRPC metadata ``authorization: Bearer <token>`` (key
lowercase, as gRPC metadata keys always are; the scheme word is matched
case-insensitively, the token exactly) on every call. The token is the one line of
``--auth-token-file`` (the fleet token), or one minted for a job or a node under the
key of ``--token-key-file`` (service/tokens.py says what each allows). A call without a
valid token ends with ``UNAUTHENTICATED`` before its handler runs, so nothing it sent is
stored (the refusals are logged at most once per 10 s, with their count); what a valid
token may do is checked by the servicer (``Authorizer.scope``), which knows the hello.
Health checks (``grpc.health.v1.Health``) stay open so that load balancers and kubelets
need no token.
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import grpc
import grpc.aio

from tfprof.collector.service.tokens import Scope, verify

log = logging.getLogger("tfprof.collector.service.auth")

METADATA_KEY = "authorization"
SCHEME = "bearer"
OPEN_PREFIXES = ("/grpc.health.v1.Health/",)
REFUSAL_LOG_INTERVAL_S = 10.0

# The interceptor sees every method of every service, whatever its message types. grpc's
# classes are generic only in grpc-stubs; at run time they cannot be subscripted.
if TYPE_CHECKING:
    Handler = grpc.RpcMethodHandler[object, object]
    Interceptor = grpc.aio.ServerInterceptor[object, object]
else:
    Interceptor = grpc.aio.ServerInterceptor


def check_authorization(header: str | bytes | None, token: bytes) -> str | None:
    """None when ``header`` carries ``token``; else why not (for the status detail)."""
    if header is None:
        return "missing authorization metadata (expected 'authorization: Bearer <token>')"
    raw = header.encode("latin-1", "replace") if isinstance(header, str) else header
    scheme, _, presented = raw.strip().partition(b" ")
    if scheme.lower() != SCHEME.encode():
        return "authorization metadata must be 'Bearer <token>'"
    # compare_digest takes time independent of where the tokens differ.
    if not hmac.compare_digest(presented.strip(), token):
        return "invalid bearer token"
    return None


def presented_token(header: str | bytes | None) -> str | None:
    """The token of an ``authorization: Bearer <token>`` header, or None."""
    if header is None:
        return None
    raw = header.encode("latin-1", "replace") if isinstance(header, str) else header
    scheme, _, presented = raw.strip().partition(b" ")
    if scheme.lower() != SCHEME.encode():
        return None
    return presented.strip().decode("latin-1")


class Authorizer:
    """The collector's tokens: the fleet token, the key of scoped tokens, or neither
    (``enabled`` False: every call is ``Scope("open")``)."""

    def __init__(self, token: str | None = None, key: bytes | None = None) -> None:
        self._token = token.encode("ascii") if token else None
        self._key = key
        self.enabled = bool(token or key)

    def check(self, header: str | bytes | None) -> tuple[Scope | None, str]:
        """(the scope ``header`` grants, "") or (None, why it grants nothing)."""
        if not self.enabled:
            return Scope("open"), ""
        if self._token is not None:
            why = check_authorization(header, self._token)
            if why is None:
                return Scope("admin"), ""
        else:
            why = "missing authorization metadata (expected 'authorization: Bearer <token>')"
        presented = presented_token(header)
        if self._key is not None and presented:
            scope = verify(self._key, presented)
            if scope is not None:
                return scope, ""
            why = "invalid bearer token"
        elif header is not None and presented is None:
            why = "authorization metadata must be 'Bearer <token>'"
        return None, why

    def scope(self, metadata: object) -> Scope | None:
        """The scope of a call's invocation metadata (None: no valid token)."""
        return self.check(_header(metadata))[0]


def _header(metadata: object) -> str | bytes | None:
    for key, value in metadata or ():  # type: ignore[attr-defined]
        if key == METADATA_KEY:
            return value  # type: ignore[no-any-return]
    return None


class RefusalLog:
    """Refused calls logged at most once per ``interval_s``, with how many were refused.

    A misconfigured fleet (a wrong token on every node) must not fill the log with one
    line per call; the request-error metric still counts each refusal.
    """

    def __init__(self, interval_s: float = REFUSAL_LOG_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self._unlogged = 0
        self._last_logged = -float("inf")

    def refused(self, method: str, peer: str, why: str, now: float | None = None) -> bool:
        """Note one refusal; True when it was logged (with the ones held back before it)."""
        now = time.monotonic() if now is None else now
        self._unlogged += 1
        if now - self._last_logged < self.interval_s:
            return False
        count, self._unlogged, self._last_logged = self._unlogged, 0, now
        if count == 1:
            log.warning("refused %s from %s: %s", method, peer, why)
        else:
            log.warning(
                "refused %d calls without a valid token in the last %.0f s (latest: %s from "
                "%s: %s)",
                count,
                self.interval_s,
                method,
                peer,
                why,
            )
        return True


def _denied(handler: Handler, method: str, why: str, refusals: RefusalLog) -> Handler:
    """A handler of the same shape as ``handler`` that only logs and aborts."""

    async def abort(request: object, context: grpc.aio.ServicerContext[object, object]) -> None:
        refusals.refused(method, context.peer(), why)
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, why)

    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(abort)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(abort)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(abort)
    return grpc.unary_unary_rpc_method_handler(abort)


class TokenAuthInterceptor(Interceptor):
    """For the ``grpc.aio`` server: refuses a call without a valid token."""

    def __init__(
        self, token: str | Authorizer, on_denied: Callable[[str], None] | None = None
    ) -> None:
        self._auth = token if isinstance(token, Authorizer) else Authorizer(token)
        self._on_denied = on_denied
        self.refusals = RefusalLog()

    async def intercept_service(  # type: ignore[override]  # grpc-stubs: never None
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        method = handler_call_details.method
        handler = await continuation(handler_call_details)
        if handler is None or method.startswith(OPEN_PREFIXES):
            return handler
        scope, why = self._auth.check(_header(handler_call_details.invocation_metadata))
        if scope is not None:
            return handler
        if self._on_denied is not None:
            self._on_denied(method)
        return _denied(handler, method, why, self.refusals)
