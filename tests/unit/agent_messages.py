"""Agent messages for the collector's Stream RPC (a hello, batches of kernels, a goodbye) and
streams of them sent through a real gRPC stub."""

from __future__ import annotations

import grpc
import pytest

from tfprof.core.records import COLUMNS
from tfprof.core.version import PROTOCOL_VERSION
from tfprof.proto import collector_pb2 as pb
from tfprof.proto import collector_pb2_grpc as pb_grpc

RPC_TIMEOUT = 10.0


def hello(
    job: str = "train",
    stream_id: str = "s1",
    version: int = PROTOCOL_VERSION,
    *,
    run_id: str = "run1",
    host: str = "node-a",
    pid: int = 100,
    task: str = "0",
) -> pb.AgentMessage:
    return pb.AgentMessage(
        hello=pb.Hello(
            protocol_version=version,
            stream_secret=b"s" * 32,
            job=job,
            run_id=run_id,
            stream_id=stream_id,
            host=host,
            pid=pid,
            task=task,
        )
    )


def batch(seq: int, starts: list[int], strings: list[str] | None = None) -> pb.AgentMessage:
    b = pb.Batch(seq=seq, string_base=1)
    b.strings.extend(strings or [])
    n = len(starts)
    for col in COLUMNS:
        getattr(b.records, col).extend([0] * n)
    b.records.kind[:] = [pb.KERNEL] * n
    b.records.start_ns[:] = starts
    b.records.duration_ns[:] = [50] * n
    b.records.name[:] = [1] * n
    return pb.AgentMessage(batch=b)


def goodbye(records: int) -> pb.AgentMessage:
    return pb.AgentMessage(goodbye=pb.Goodbye(records_sent=records))


def run_stream(stub: pb_grpc.CollectorStub, messages: list[pb.AgentMessage]) -> list[int]:
    return [ack.seq for ack in stub.Stream(iter(messages), timeout=RPC_TIMEOUT)]


def rejected(stub: pb_grpc.CollectorStub, messages: list[pb.AgentMessage]) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        run_stream(stub, messages)
    return info.value
