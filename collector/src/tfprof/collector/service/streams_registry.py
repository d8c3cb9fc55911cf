"""The live agent streams of one server, by the identity their hello gave, so a capture
window can be sent down every stream that matches.

Lives on the server's event loop and is touched only from it: no locks. Each entry
carries ``push``, which queues a ``CaptureWindow`` on that stream's response without
waiting for the agent to read it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from tfprof.proto import collector_pb2 as pb


@dataclass(frozen=True, eq=False)
class LiveStream:
    identity: pb.CaptureStream
    push: Callable[[pb.CaptureWindow], None]


def identity_of(hello: pb.Hello) -> pb.CaptureStream:
    """What capture replies and ``captures`` say of a stream: never its stream id (nor
    its secret), which with the run id would let the reader speak for it."""
    return pb.CaptureStream(
        job=hello.job, host=hello.host, pid=hello.pid, task=hello.task, run_id=hello.run_id
    )


class StreamRegistry:
    """Calls in progress (``calls``, said hello or not) and the streams that said hello."""

    def __init__(self) -> None:
        self.calls = 0
        self._live: set[LiveStream] = set()

    def __len__(self) -> int:
        return len(self._live)

    def __iter__(self) -> Iterator[LiveStream]:
        return iter(list(self._live))

    def add(self, stream: LiveStream) -> None:
        self._live.add(stream)

    def discard(self, stream: LiveStream | None) -> None:
        if stream is not None:
            self._live.discard(stream)
