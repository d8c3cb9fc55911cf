"""Bearer-token authentication (collector/service/auth.py) and TLS on an in-process collector."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.unit.agent_messages import batch, goodbye, hello
from tests.unit.tls_certs import make_cert
from tfprof.collector.service.auth import check_authorization
from tfprof.collector.service.server import CollectorServer
from tfprof.proto import collector_pb2 as pb
from tfprof.proto import collector_pb2_grpc as pb_grpc

pytestmark = pytest.mark.timeout(60)
TOKEN = "tok-3f9a1c"
RPC_TIMEOUT = 10.0


@pytest.mark.parametrize(
    ("header", "ok"),
    [
        (f"Bearer {TOKEN}", True),
        (f"bearer {TOKEN}", True),
        (f"Bearer  {TOKEN} ", True),
        (None, False),
        ("", False),
        (TOKEN, False),
        (f"Basic {TOKEN}", False),
        (f"Bearer {TOKEN}x", False),
        (f"Bearer {TOKEN[:-1]}", False),
        ("Bearer ", False),
    ],
)
def test_check_authorization(header: str | None, ok: bool) -> None:
    assert (check_authorization(header, TOKEN.encode()) is None) == ok


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[CollectorServer]:
    server = CollectorServer(
        "127.0.0.1:0", str(tmp_path / "data"), max_workers=8, auth_token=TOKEN
    ).start()
    try:
        yield server
    finally:
        server.stop(grace=1.0)


def stream(server: CollectorServer, metadata: tuple[tuple[str, str], ...] | None) -> list[int]:
    with grpc.insecure_channel(server.address) as ch:
        stub = pb_grpc.CollectorStub(ch)
        msgs = [hello(), batch(1, [1, 2]), goodbye(2)]
        return [a.seq for a in stub.Stream(iter(msgs), metadata=metadata, timeout=RPC_TIMEOUT)]


@pytest.mark.parametrize(
    "metadata",
    [None, (("authorization", "Bearer wrong"),), (("authorization", TOKEN),),
     (("x-token", TOKEN),)],
)  # fmt: skip
def test_without_the_token_nothing_is_stored(
    secured: CollectorServer, metadata: tuple[tuple[str, str], ...] | None
) -> None:
    with pytest.raises(grpc.RpcError) as info:
        stream(secured, metadata)
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert list(secured.store.jobs_dir.iterdir()) == []
    with grpc.insecure_channel(secured.address) as ch, pytest.raises(grpc.RpcError) as info:
        pb_grpc.CollectorStub(ch).Clock(pb.ClockRequest(t1_ns=1), metadata=metadata, timeout=5)
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    errors = secured.metrics.value("tfprof_collector_request_errors_total", code="UNAUTHENTICATED")
    assert errors == 2


def test_with_the_token_streams_are_stored(secured: CollectorServer) -> None:
    assert stream(secured, (("authorization", f"Bearer {TOKEN}"),)) == [0, 1]
    (job,) = secured.store.load_jobs()
    assert job.num_records == 2


def test_health_checks_need_no_token(secured: CollectorServer) -> None:
    with grpc.insecure_channel(secured.address) as ch:
        reply = health_pb2_grpc.HealthStub(ch).Check(
            health_pb2.HealthCheckRequest(service=""), timeout=RPC_TIMEOUT
        )
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_tls_with_token(tmp_path: Path) -> None:
    cert, key = make_cert(tmp_path)
    server = CollectorServer("127.0.0.1:0", str(tmp_path / "data"), max_workers=4,
                             tls_cert=cert.read_bytes(), tls_key=key.read_bytes(),
                             auth_token=TOKEN).start()  # fmt: skip
    try:
        creds = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
        with grpc.secure_channel(server.address, creds) as ch:
            stub = pb_grpc.CollectorStub(ch)
            msgs = [hello(), batch(1, [7]), goodbye(1)]
            meta = (("authorization", f"Bearer {TOKEN}"),)
            acks = [a.seq for a in stub.Stream(iter(msgs), metadata=meta, timeout=RPC_TIMEOUT)]
            assert acks == [0, 1]
        # A plaintext client cannot talk to a TLS collector.
        with grpc.insecure_channel(server.address) as ch, pytest.raises(grpc.RpcError) as info:
            pb_grpc.CollectorStub(ch).Clock(pb.ClockRequest(t1_ns=1), metadata=meta, timeout=5)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        server.stop(grace=1.0)
    (job,) = server.store.load_jobs()
    assert job.num_records == 1
