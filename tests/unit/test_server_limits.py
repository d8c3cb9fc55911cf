"""The aio server's limits on a real in-process collector: streams without a hello are
closed, the stream limit answers RESOURCE_EXHAUSTED, and health and Clock answer while
every storage thread is busy; the byte budget and the refusal log on their own."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.unit.agent_messages import batch, goodbye, hello
from tests.unit.raw_stream import RawStream
from tfprof.collector.service.auth import RefusalLog
from tfprof.collector.service.byte_budget import ByteBudget
from tfprof.collector.service.server import CollectorServer
from tfprof.proto import collector_pb2 as pb
from tfprof.proto import collector_pb2_grpc as pb_grpc

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def small(tmp_path: Path) -> Iterator[CollectorServer]:
    server = CollectorServer(
        "127.0.0.1:0", str(tmp_path / "data"), max_workers=1, max_streams=2, hello_timeout_s=0.5
    ).start()
    try:
        yield server
    finally:
        server.stop(grace=1.0)


def test_a_stream_that_never_says_hello_is_closed(small: CollectorServer) -> None:
    with grpc.insecure_channel(small.address) as ch:
        silent = RawStream(pb_grpc.CollectorStub(ch))
        err = silent.error()
        assert err.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert "no hello within 0.5 s" in (err.details() or "")
        silent.close()
        # A stream that says hello in time is held past the timeout.
        live = RawStream(pb_grpc.CollectorStub(ch))
        live.send(hello())
        assert live.next_ack().seq == 0
        assert live.acks.empty()
        live.send(batch(1, [5]))
        assert live.next_ack(timeout=5).seq == 1
        live.send(goodbye(1))
        live.close()


def test_beyond_the_stream_limit_calls_are_refused_but_clock_and_health_answer(
    small: CollectorServer,
) -> None:
    with grpc.insecure_channel(small.address) as ch:
        stub = pb_grpc.CollectorStub(ch)
        held = [RawStream(stub) for _ in range(2)]
        for i, s in enumerate(held):
            s.send(hello(stream_id=f"s{i}"))
            assert s.next_ack().seq == 0
        err = RawStream(stub).error()
        assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "limit of 2 streams" in (err.details() or "")
        assert stub.Clock(pb.ClockRequest(t1_ns=1), timeout=5).t1_ns == 1
        health = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert health.status == health_pb2.HealthCheckResponse.SERVING
        for s in held:
            s.send(goodbye(0))
            s.close()


def test_clock_and_health_answer_while_storage_is_blocked(small: CollectorServer) -> None:
    release = threading.Event()
    small.servicer.storage.submit(release.wait, 30)  # the pool's only thread
    try:
        with grpc.insecure_channel(small.address) as ch:
            stub = pb_grpc.CollectorStub(ch)
            waiting = RawStream(stub)
            waiting.send(hello())  # cannot be stored until the pool frees up
            for _ in range(3):
                assert stub.Clock(pb.ClockRequest(t1_ns=7), timeout=5).t1_ns == 7
                reply = health_pb2_grpc.HealthStub(ch).Check(
                    health_pb2.HealthCheckRequest(), timeout=5
                )
                assert reply.status == health_pb2.HealthCheckResponse.SERVING
            assert waiting.acks.empty()
            release.set()
            assert waiting.next_ack().seq == 0
            waiting.send(goodbye(0))
            waiting.close()
    finally:
        release.set()


def test_byte_budget_is_first_come_first_served_and_lets_a_huge_batch_run_alone() -> None:
    async def scenario() -> list[str]:
        budget = ByteBudget(100)
        order: list[str] = []

        async def take(name: str, nbytes: int, hold: float) -> None:
            await budget.acquire(nbytes)
            order.append(name)
            assert budget.held <= budget.limit or budget.held == nbytes
            await asyncio.sleep(hold)
            budget.release(nbytes)

        first = asyncio.create_task(take("a", 80, 0.05))
        await asyncio.sleep(0)
        tasks = [
            asyncio.create_task(take("huge", 500, 0.01)),  # waits until nothing is held
            asyncio.create_task(take("small", 10, 0)),  # fits now, but waits its turn
        ]
        cancelled = asyncio.create_task(take("cancelled", 50, 0))
        await asyncio.sleep(0)
        cancelled.cancel()
        await asyncio.gather(first, *tasks)
        assert budget.held == 0 and budget.waiting == 0
        return order

    assert asyncio.run(scenario()) == ["a", "huge", "small"]


def test_refusals_are_logged_once_per_interval_with_their_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    refusals = RefusalLog(interval_s=10.0)
    with caplog.at_level(logging.WARNING, logger="tfprof.collector.service.auth"):
        assert refusals.refused("/m", "peer1", "invalid bearer token", now=100.0)
        for i in range(50):
            assert not refusals.refused("/m", f"peer{i}", "invalid bearer token", now=101.0)
        assert refusals.refused("/m", "peer9", "missing authorization", now=111.0)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert "refused /m from peer1: invalid bearer token" in lines[0]
    assert "refused 51 calls without a valid token in the last 10 s" in lines[1]
