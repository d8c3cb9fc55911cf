"""Bearer-token authentication of the collector's RPCs, as a gRPC server interceptor.

Contract: the agent sends gRPC metadata ``authorization: Bearer <token>`` (key
lowercase, as gRPC metadata keys always are; the scheme word is matched
case-insensitively, the token exactly) on every call. The token is the one line of
``--auth-token-file``. A call without it, or with another token, ends with
``UNAUTHENTICATED`` before its handler runs, so nothing it sent is stored. Health checks
(``grpc.health.v1.Health``) stay open so that load balancers and kubelets need no token.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn

import grpc

log = logging.getLogger("tfprof.collector.auth")

METADATA_KEY = "authorization"
SCHEME = "bearer"
OPEN_PREFIXES = ("/grpc.health.v1.Health/",)

# The interceptor sees every method of every service, whatever its message types. grpc's
# classes are generic only in grpc-stubs; at run time they cannot be subscripted.
if TYPE_CHECKING:
    Handler = grpc.RpcMethodHandler[object, object]
    Interceptor = grpc.ServerInterceptor[object, object]
else:
    Interceptor = grpc.ServerInterceptor


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


def _denied(handler: Handler, method: str, why: str) -> Handler:
    """A handler of the same shape as ``handler`` that only logs and aborts."""

    def abort(request: object, context: grpc.ServicerContext) -> NoReturn:
        log.warning("refused %s from %s: %s", method, context.peer(), why)
        context.abort(grpc.StatusCode.UNAUTHENTICATED, why)

    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(abort)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(abort)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(abort)
    return grpc.unary_unary_rpc_method_handler(abort)


class TokenAuthInterceptor(Interceptor):
    def __init__(self, token: str, on_denied: Callable[[str], None] | None = None) -> None:
        self._token = token.encode("ascii")
        self._on_denied = on_denied

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Handler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        method = handler_call_details.method
        handler = continuation(handler_call_details)
        if handler is None or method.startswith(OPEN_PREFIXES):
            return handler
        header = None
        for key, value in handler_call_details.invocation_metadata or ():
            if key == METADATA_KEY:
                header = value
                break
        why = check_authorization(header, self._token)
        if why is None:
            return handler
        if self._on_denied is not None:
            self._on_denied(method)
        return _denied(handler, method, why)
