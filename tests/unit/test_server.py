"""collector/service/server.py over a real in-process gRPC server on 127.0.0.1 (a free port)."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.unit.agent_messages import RPC_TIMEOUT, batch, goodbye, hello, rejected, run_stream
from tfprof.collector.service.server import SERVICE_NAME, CollectorServer
from tfprof.core.version import PROTOCOL_VERSION
from tfprof.proto import collector_pb2 as pb
from tfprof.proto import collector_pb2_grpc as pb_grpc

pytestmark = pytest.mark.timeout(60)
_END = object()


def test_a_full_stream_is_acknowledged_and_stored(
    collector: CollectorServer, stub: pb_grpc.CollectorStub
) -> None:
    acks = run_stream(
        stub,
        [hello(), batch(1, [1_000, 2_000], ["gemm"]), batch(2, [3_000]), goodbye(3)],
    )
    assert acks == [0, 1, 2]  # the hello's ack says where to resume: nothing stored yet

    (job,) = collector.store.load_jobs(["train"])
    (s,) = job.streams
    assert s.finished
    assert s.strings == ["", "gemm"]
    assert s.records["start_ns"].tolist() == [1_000, 2_000, 3_000]
    assert s.host == "node-a"


def test_a_reconnecting_stream_resumes_without_duplicates(
    collector: CollectorServer, stub: pb_grpc.CollectorStub
) -> None:
    assert run_stream(stub, [hello(), batch(1, [1]), batch(2, [2])]) == [0, 1, 2]
    # The agent lost the connection before seeing ack 2 and replays batch 2.
    assert run_stream(stub, [hello(), batch(2, [2]), batch(3, [3]), goodbye(3)]) == [2, 2, 3]
    (job,) = collector.store.load_jobs(["train"])
    (s,) = job.streams
    assert s.records["start_ns"].tolist() == [1, 2, 3]
    assert s.finished


def ragged() -> pb.AgentMessage:
    msg = batch(1, [1, 2])
    msg.batch.records.stream.append(9)
    return msg


def negative_duration() -> pb.AgentMessage:
    msg = batch(1, [1])
    msg.batch.records.duration_ns[0] = -5
    return msg


def ragged_host() -> pb.AgentMessage:
    msg = pb.AgentMessage(batch=pb.Batch(seq=1))
    msg.batch.host.time_ns.extend([1, 2])
    msg.batch.host.threads.extend([1])
    return msg


@pytest.mark.parametrize(
    ("messages", "code", "detail"),
    [
        ([batch(1, [1])], grpc.StatusCode.FAILED_PRECONDITION, "batch before hello"),
        ([goodbye(0)], grpc.StatusCode.FAILED_PRECONDITION, "goodbye before hello"),
        ([hello(), hello()], grpc.StatusCode.FAILED_PRECONDITION, "second hello"),
        (
            [hello(version=PROTOCOL_VERSION + 1)],
            grpc.StatusCode.UNIMPLEMENTED,
            f"protocol version {PROTOCOL_VERSION + 1}",
        ),
        ([hello(version=1)], grpc.StatusCode.UNIMPLEMENTED, "protocol version 1"),
        ([hello(version=0)], grpc.StatusCode.UNIMPLEMENTED, "protocol version 0"),
        ([hello(job="../etc")], grpc.StatusCode.INVALID_ARGUMENT, "invalid job name"),
        ([hello(job="")], grpc.StatusCode.INVALID_ARGUMENT, "invalid job name"),
        ([hello(stream_id="a/b")], grpc.StatusCode.INVALID_ARGUMENT, "invalid stream id"),
        ([hello(), ragged()], grpc.StatusCode.INVALID_ARGUMENT, "different lengths"),
        ([hello(), ragged_host()], grpc.StatusCode.INVALID_ARGUMENT, "different lengths"),
        ([hello(), negative_duration()], grpc.StatusCode.INVALID_ARGUMENT, "negative"),
        ([hello(), batch(0, [1])], grpc.StatusCode.INVALID_ARGUMENT, "start at 1"),
        ([hello(), pb.AgentMessage()], grpc.StatusCode.INVALID_ARGUMENT, "empty"),
    ],
)
def test_bad_streams_get_a_precise_status(
    collector: CollectorServer,
    stub: pb_grpc.CollectorStub,
    messages: list[pb.AgentMessage],
    code: grpc.StatusCode,
    detail: str,
) -> None:
    err = rejected(stub, messages)
    assert err.code() == code
    assert detail in (err.details() or "")
    assert not any(s.num_records for j in collector.store.load_jobs() for s in j.streams)


def test_a_rejected_stream_leaves_a_concurrent_stream_alone(
    collector: CollectorServer, stub: pb_grpc.CollectorStub
) -> None:
    requests: queue.Queue[object] = queue.Queue()

    def feed() -> Iterator[pb.AgentMessage]:
        while (item := requests.get(timeout=RPC_TIMEOUT)) is not _END:
            assert isinstance(item, pb.AgentMessage)
            yield item

    healthy = stub.Stream(feed(), timeout=RPC_TIMEOUT * 2)
    acks = iter(healthy)  # the call itself: grpc's call objects are their own iterators
    requests.put(hello(job="good"))
    assert next(acks).seq == 0
    requests.put(batch(1, [1, 2]))
    assert next(acks).seq == 1

    assert rejected(stub, [hello(job="bad"), ragged()]).code() == grpc.StatusCode.INVALID_ARGUMENT
    assert rejected(stub, [batch(1, [1])]).code() == grpc.StatusCode.FAILED_PRECONDITION

    requests.put(batch(2, [3]))
    assert next(acks).seq == 2
    requests.put(goodbye(3))
    requests.put(_END)
    assert list(healthy) == []
    assert healthy.code() == grpc.StatusCode.OK

    (good,) = collector.store.load_jobs(["good"])
    assert good.streams[0].records["start_ns"].tolist() == [1, 2, 3]
    assert good.streams[0].finished


def test_health_check_reports_serving(channel: grpc.Channel) -> None:
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", SERVICE_NAME):
        reply = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=RPC_TIMEOUT)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
    assert SERVICE_NAME == "tfprof.v1.Collector"


def test_clock_reply_stamps_in_order(stub: pb_grpc.CollectorStub) -> None:
    reply = stub.Clock(pb.ClockRequest(t1_ns=12345), timeout=RPC_TIMEOUT)
    assert reply.t1_ns == 12345
    assert 0 < reply.t2_ns <= reply.t3_ns


def test_oversized_messages_are_refused(tmp_path: Path) -> None:
    server = CollectorServer("127.0.0.1:0", str(tmp_path / "d"), max_workers=4,
                             max_message_bytes=4096).start()  # fmt: skip
    try:
        with grpc.insecure_channel(server.address) as ch:
            stub = pb_grpc.CollectorStub(ch)
            err = rejected(stub, [hello(), batch(1, list(range(2000)))])
            assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    finally:
        server.stop(grace=1.0)


def test_port_zero_binds_a_real_port(collector: CollectorServer) -> None:
    assert collector.port > 0
    assert collector.address == f"127.0.0.1:{collector.port}"


def test_empty_columns_mean_zeros_and_are_accepted(
    collector: CollectorServer, stub: pb_grpc.CollectorStub
) -> None:
    sparse = pb.Batch(seq=1)
    sparse.records.kind.extend([pb.MEMCPY] * 2)
    sparse.records.start_ns.extend([10, 20])
    sparse.records.duration_ns.extend([5, 6])
    sparse.records.bytes.extend([4096, 8192])
    assert run_stream(stub, [hello(), pb.AgentMessage(batch=sparse), goodbye(2)]) == [0, 1]
    (job,) = collector.store.load_jobs(["train"])
    (s,) = job.streams
    assert s.records["bytes"].tolist() == [4096, 8192]
    assert s.records["grid_x"].tolist() == [0, 0]
