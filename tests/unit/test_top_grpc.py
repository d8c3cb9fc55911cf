"""``top --collector`` takes the collector's gRPC address, as every other command does: the
LiveFigures call gives the same figures as the Prometheus endpoint, behind the same token;
the metrics address given by mistake is named for what it is."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from tests.unit.agent_messages import batch, goodbye
from tests.unit.fleet_hello import hello
from tests.unit.raw_stream import RawStream
from tfprof.collector.cli import main
from tfprof.collector.service.metrics import serve_metrics
from tfprof.collector.service.remote import Remote
from tfprof.collector.service.server import CollectorServer
from tfprof.collector.top.scrape import parse_metrics, read_live
from tfprof.proto import collector_pb2 as pb
from tfprof.proto import collector_pb2_grpc as pb_grpc

pytestmark = pytest.mark.timeout(60)
TOKEN = "top-token-5"


@pytest.fixture(autouse=True)
def own_log_handlers() -> Iterator[None]:
    logger = logging.getLogger("tfprof")
    before = list(logger.handlers)
    logger.handlers[:] = []  # one an earlier test left may write to a closed capture
    yield
    logger.handlers[:] = before


def feed(server: CollectorServer, metadata: tuple[tuple[str, str], ...] = ()) -> RawStream:
    """Two jobs' streams: alpha with 3 kernels (one open stream), beta with 1 (finished)."""
    now = time.time_ns()
    ch = grpc.insecure_channel(server.address)
    alpha = RawStream(pb_grpc.CollectorStub(ch), metadata)
    alpha.send(hello("alpha", "node-a", 1))
    alpha.next_ack()
    alpha.send(batch(1, [now, now + 1000, now + 2000], ["gemm"]))
    alpha.next_ack()
    beta = RawStream(pb_grpc.CollectorStub(ch), metadata)
    beta.send(hello("beta", "node-a", 2))
    beta.next_ack()
    beta.send(batch(1, [now], ["relu"]))
    beta.next_ack()
    beta.send(goodbye(1))
    beta.close()
    return alpha


@pytest.fixture
def fed(collector: CollectorServer) -> Iterator[CollectorServer]:
    alpha = feed(collector)
    try:
        yield collector
    finally:
        alpha.send(goodbye(3))
        alpha.close()


def test_live_figures_are_the_metrics_endpoints_figures(fed: CollectorServer) -> None:
    with Remote(fed.address) as remote:
        over_grpc = read_live(remote)
    # What Prometheus (and top --metrics-url) reads of the same collector at that moment.
    scraped = parse_metrics(fed.metrics.exposition().decode(), over_grpc.at)
    assert over_grpc == scraped
    assert over_grpc.kernels == {("alpha", "node-a", "node-a/gpu:0"): 3.0,
                                 ("beta", "node-a", "node-a/gpu:0"): 1.0}  # fmt: skip
    assert over_grpc.processes == {"alpha": 1.0, "beta": 0.0}


def test_top_once_asks_the_grpc_address(
    fed: CollectorServer, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["top", "--collector", fed.address, "--once", "--format", "json", "--interval", "50ms"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["collector"] == fed.address
    jobs = {j["job"]: j for j in out["jobs"]}
    assert jobs["alpha"]["kernels_total"] == 3 and jobs["beta"]["kernels_total"] == 1
    assert jobs["alpha"]["processes"] == 1


def test_the_metrics_address_given_as_collector_is_named(
    fed: CollectorServer, capsys: pytest.CaptureFixture[str]
) -> None:
    http, metrics = serve_metrics(fed.metrics, "127.0.0.1:0")
    try:
        assert main(["top", "--collector", metrics, "--once"]) == 2
        err = capsys.readouterr().err.splitlines()
        assert err == [
            f"tfprof-collector: {metrics} is a Prometheus metrics endpoint, not the "
            "collector's gRPC address: give --collector HOST:PORT (serve --listen), or "
            f"--metrics-url {metrics}"
        ]
        assert main(["top", "--metrics-url", metrics, "--once", "--interval", "50ms"]) == 0
        assert "alpha" in capsys.readouterr().out
        assert main(["top", "--collector", fed.address, "--metrics-url", metrics]) == 2
    finally:
        http.shutdown()


def test_top_needs_the_token_as_other_calls_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = CollectorServer("127.0.0.1:0", str(tmp_path / "data"), auth_token=TOKEN).start()
    alpha = feed(server, (("authorization", f"Bearer {TOKEN}"),))
    try:
        assert main(["top", "--collector", server.address, "--once"]) == 2
        assert "refused" in capsys.readouterr().err
        token = tmp_path / "token"
        token.write_text(TOKEN)
        argv = ["top", "--collector", server.address, "--auth-token-file", str(token),
                "--once", "--format", "json", "--interval", "50ms"]  # fmt: skip
        assert main(argv) == 0
        assert {j["job"] for j in json.loads(capsys.readouterr().out)["jobs"]} == {"alpha", "beta"}
    finally:
        alpha.send(goodbye(3))
        alpha.close()
        server.stop(grace=1.0)


def test_live_figures_answer_an_empty_collector(stub: pb_grpc.CollectorStub) -> None:
    assert stub.LiveFigures(pb.LiveFiguresRequest(), timeout=10) == pb.LiveFiguresReply()
