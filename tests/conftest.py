"""Fixtures shared by unit and integration tests."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # imported where used: collecting agent-only tests needs no collector
    import grpc

    from tfprof.collector.service.server import CollectorServer
    from tfprof.proto.collector_pb2_grpc import CollectorStub


@pytest.fixture(autouse=True)
def _tfprof_logger_left_as_new() -> Iterator[None]:
    """Each test leaves the ``tfprof`` logger as a fresh process has it (no handler, no
    level): a CLI ``main`` run in-process sets its handler and level, which would
    otherwise make a later test's in-process collector (a module's fixture, set up
    before the next test's own) log its INFO lines to that test's stderr."""
    yield
    logger = logging.getLogger("tfprof")
    logger.handlers.clear()
    logger.setLevel(logging.NOTSET)


@pytest.fixture
def collector(tmp_path: Path) -> Iterator[CollectorServer]:
    """A real collector on 127.0.0.1 (a free port), storing under ``tmp_path/data``."""
    from tfprof.collector.service.server import CollectorServer

    server = CollectorServer("127.0.0.1:0", str(tmp_path / "data"), max_workers=16).start()
    try:
        yield server
    finally:
        server.stop(grace=1.0)


@pytest.fixture
def channel(collector: CollectorServer) -> Iterator[grpc.Channel]:
    """A gRPC channel to ``collector``."""
    import grpc

    with grpc.insecure_channel(collector.address) as ch:
        yield ch


@pytest.fixture
def stub(channel: grpc.Channel) -> CollectorStub:
    """The generated Collector stub on ``channel``."""
    from tfprof.proto import collector_pb2_grpc as pb_grpc

    return pb_grpc.CollectorStub(channel)
