"""The Collector service's handler table, made from collector.proto's descriptor.

Why not the generated ``add_CollectorServicer_to_server``: it parses every request with
``FromString`` before our code runs, so a message protobuf cannot parse ends as
``INTERNAL`` with no word of why, and an oversized one is neither counted nor logged.
Here each request arrives through ``lenient`` (a size check, then a parse whose failure
becomes ``INVALID_ARGUMENT`` with protobuf's reason), and Stream messages through
``size_checked`` only: they are parsed in the storage pool, off the event loop.

What the generated code gives for free is kept: the table lists every method of the
service as the descriptor declares it, with its streaming kinds and message types, and a
method the servicer lacks stops the server at start-up instead of answering
``UNIMPLEMENTED`` (tests/unit/test_rpc_table.py holds the table to collector.proto).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
from google.protobuf.message import DecodeError, Message

from tfprof.collector.errors import CollectorError, InvalidArgument, TooLarge
from tfprof.proto import collector_pb2 as pb

SERVICE = pb.DESCRIPTOR.services_by_name["Collector"]
SERVICE_NAME = SERVICE.full_name
# Methods whose requests stay bytes on the loop (parsed later, in the storage pool).
RAW_REQUESTS = frozenset({"Stream"})

Request = TypeVar("Request", bound=Message)


@dataclass(frozen=True)
class Malformed:
    """A request we refuse to parse: protobuf cannot, or it is over the size limit."""

    error: CollectorError

    def exception(self) -> CollectorError:
        return self.error


def _too_large(name: str, size: int, max_bytes: int) -> Malformed:
    return Malformed(
        TooLarge(
            f"{name} of {size} bytes is over this collector's limit of {max_bytes} "
            "(--max-message-bytes)"
        )
    )


def lenient(cls: type[Request], max_bytes: int) -> Callable[[bytes], Request | Malformed]:
    name = cls.DESCRIPTOR.name

    def parse(data: bytes) -> Request | Malformed:
        if len(data) > max_bytes:
            return _too_large(name, len(data), max_bytes)
        try:
            return cls.FromString(data)
        except DecodeError as exc:
            return Malformed(InvalidArgument(f"malformed {name}: {exc or 'cannot parse'}"))

    return parse


def size_checked(max_bytes: int) -> Callable[[bytes], bytes | Malformed]:
    """Stream messages stay bytes on the loop: they are parsed in the storage pool."""

    def check(data: bytes) -> bytes | Malformed:
        if len(data) > max_bytes:
            return _too_large("AgentMessage", len(data), max_bytes)
        return data

    return check


# (client streaming, server streaming) -> the grpc constructor of that kind of handler.
_KINDS: dict[tuple[bool, bool], Callable[..., grpc.RpcMethodHandler[Any, Any]]] = {
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}


def message_class(name: str) -> type[Message]:
    cls: type[Message] = getattr(pb, name)
    return cls


def handler_table(servicer: object, max_bytes: int) -> grpc.GenericRpcHandler[Any, Any]:
    """A handler for every method of the Collector service, bound to ``servicer``'s
    method of the same name; AttributeError names a method it lacks."""
    handlers = {}
    for method in SERVICE.methods:
        behaviour = getattr(servicer, method.name)
        if method.name in RAW_REQUESTS:
            parse: Callable[[bytes], Any] = size_checked(max_bytes)
        else:
            parse = lenient(message_class(method.input_type.name), max_bytes)
        make = _KINDS[(method.client_streaming, method.server_streaming)]
        handlers[method.name] = make(
            behaviour,
            request_deserializer=parse,
            response_serializer=message_class(method.output_type.name).SerializeToString,
        )
    return grpc.method_handlers_generic_handler(SERVICE_NAME, handlers)
