"""Many idle agent streams (hello only) held open on a few channels with ``grpc.aio``, in a
background thread: one client process can hold thousands without a thread each."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import grpc
import grpc.aio

from tfprof.core.version import PROTOCOL_VERSION
from tfprof.proto import collector_pb2 as pb
from tfprof.proto import collector_pb2_grpc as pb_grpc


class IdleStreams:
    def __init__(self, address: str, count: int, per_channel: int = 100) -> None:
        self.address = address
        self.count = count
        self.per_channel = per_channel
        self.opened = 0
        self.refused: list[str] = []
        self._calls: list[Any] = []
        self._channels: list[grpc.aio.Channel] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()

    def open(self, timeout: float = 120) -> None:
        asyncio.run_coroutine_threadsafe(self._open(), self._loop).result(timeout)

    async def _open(self) -> None:
        stubs: list[Any] = []  # aio stubs: grpc-stubs types them as sync ones
        for _ in range(0, self.count, self.per_channel):
            channel = grpc.aio.insecure_channel(self.address)
            self._channels.append(channel)
            stubs.append(pb_grpc.CollectorStub(channel))
        await asyncio.gather(
            *(self._one(stubs[i // self.per_channel], i) for i in range(self.count))
        )

    async def _one(self, stub: Any, index: int) -> None:
        hello = pb.Hello(protocol_version=PROTOCOL_VERSION, stream_secret=b"s" * 32,
                         job=f"idle{index % 50}", run_id="r1",
                         stream_id=f"idle-{index}", host=f"node{index % 16}", pid=index + 1,
                         task=str(index))  # fmt: skip
        call: Any = stub.Stream()
        try:
            await call.write(pb.AgentMessage(hello=hello))
            ack = await call.read()
        except grpc.RpcError as exc:
            self.refused.append(str(exc))
            return
        if isinstance(ack, pb.Ack):
            self._calls.append(call)
            self.opened += 1

    def close(self) -> None:
        async def end() -> None:
            for call in self._calls:
                call.cancel()
            for channel in self._channels:
                await channel.close(None)

        asyncio.run_coroutine_threadsafe(end(), self._loop).result(60)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
