"""What a Stream call may end with of its own making, and its message parse: the errors
the servicer's one status table maps (busy, no hello in time) and the size headroom gRPC
itself enforces. Request parsing and the handler table are service/rpc_table.py's."""

from __future__ import annotations

from google.protobuf.message import DecodeError

from tfprof.collector.errors import CollectorError, InvalidArgument
from tfprof.proto import collector_pb2 as pb

# gRPC itself refuses messages this far over the limit before Python sees them (a memory
# bound); up to there our deserializer does, so the refusal is logged and counted.
OVERSIZE_HEADROOM = 1 << 20


class Busy(CollectorError):
    """This collector holds as many streams (--max-streams) or runs as many exports as it
    may: retry later."""


class HelloTimeout(CollectorError):
    """A stream that did not say hello in time (--hello-timeout)."""


def parse_agent_message(data: bytes) -> pb.AgentMessage:
    try:
        return pb.AgentMessage.FromString(data)
    except DecodeError as exc:
        raise InvalidArgument(f"malformed AgentMessage: {exc or 'cannot parse'}") from None
