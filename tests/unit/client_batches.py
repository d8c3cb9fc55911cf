"""Messages for the agent's collector client, an address nothing listens on, and delivery
failures counted."""

from __future__ import annotations

import threading

from tfprof.core.records import RecordKind
from tfprof.core.version import PROTOCOL_VERSION
from tfprof.proto import collector_pb2 as pb

UNREACHABLE = "127.0.0.1:1"


def hello(job: str = "train", stream_id: str = "s1") -> pb.Hello:
    return pb.Hello(protocol_version=PROTOCOL_VERSION, stream_secret=b"s" * 32,
                    job=job, run_id="run1", stream_id=stream_id,
                    host="node-a", pid=100, task="0")  # fmt: skip


def batch(n: int, start: int = 0) -> pb.AgentMessage:
    message = pb.AgentMessage()
    b = message.batch
    b.records.kind.extend([pb.RecordKind.ValueType(RecordKind.KERNEL)] * n)
    b.records.start_ns.extend(range(start, start + n))
    b.records.duration_ns.extend([10] * n)
    return message


class Failures:
    """Collects on_failure calls; ``event`` is set by the first."""

    def __init__(self) -> None:
        self.reasons: list[str] = []
        self.event = threading.Event()

    def __call__(self, why: str) -> None:
        self.reasons.append(why)
        self.event.set()
