"""Prometheus metrics of the collector, served over HTTP by ``--metrics-listen``.

One ``CollectorMetrics`` per server, each with its own registry (tests run several
servers in one process). Ingest and the servicer call its small methods; nothing here
knows about gRPC or files.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from tfprof.collector.errors import CannotListen

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

PREFIX = "tfprof_collector"


class CollectorMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.records = Counter(
            f"{PREFIX}_records_ingested", "GPU activity records stored", registry=r
        )
        self.bytes = Counter(
            f"{PREFIX}_bytes_ingested", "bytes of batches stored (serialized size)", registry=r
        )
        self.batches = Counter(
            f"{PREFIX}_batches_acknowledged", "batches made durable and acknowledged", registry=r
        )
        self.duplicates = Counter(
            f"{PREFIX}_duplicate_batches_ignored",
            "batches whose sequence number was already stored (replays after reconnects)",
            registry=r,
        )
        self.agent_dropped = Counter(
            f"{PREFIX}_agent_dropped_records",
            "records agents reported lost before reaching the collector",
            ["reason"],
            registry=r,
        )
        self.streams_opened = Counter(
            f"{PREFIX}_streams_opened", "agent streams that said hello", registry=r
        )
        self.active_streams = Gauge(
            f"{PREFIX}_active_streams", "agent streams open now", registry=r
        )
        self.errors = Counter(
            f"{PREFIX}_request_errors",
            "RPCs ended with an error status, by gRPC status code",
            ["code"],
            registry=r,
        )
        self.storage_bytes = Gauge(
            f"{PREFIX}_storage_bytes", "bytes under the data directory's jobs/", registry=r
        )
        self._lock = threading.Lock()

    # -- fed by ingest -------------------------------------------------------------------

    def stream_opened(self) -> None:
        self.streams_opened.inc()
        self.active_streams.inc()

    def stream_closed(self) -> None:
        self.active_streams.dec()

    def batch_stored(self, records: int, nbytes: int) -> None:
        self.records.inc(records)
        self.bytes.inc(nbytes)
        self.batches.inc()

    def duplicate_ignored(self) -> None:
        self.duplicates.inc()
        self.batches.inc()  # a duplicate is acknowledged too: it is durable already

    def dropped_reported(self, reason: str, count: int) -> None:
        if count > 0:
            self.agent_dropped.labels(reason=reason).inc(count)

    # -- fed by the servicer ---------------------------------------------------------------

    def request_error(self, code: str) -> None:
        self.errors.labels(code=code).inc()

    def track_storage(self, read_bytes: Callable[[], int]) -> None:
        self.storage_bytes.set_function(lambda: float(read_bytes()))

    # -- reading -------------------------------------------------------------------------

    def exposition(self) -> bytes:
        """The text format Prometheus scrapes."""
        return generate_latest(self.registry)

    def value(self, name: str, **labels: str) -> float:
        """One sample's current value (0 when absent); for tests and the CLI."""
        sample = self.registry.get_sample_value(name, labels)
        return 0.0 if sample is None else float(sample)


def serve_metrics(metrics: CollectorMetrics, listen: str) -> tuple[WSGIServer, str]:
    """Start the HTTP exporter on ``listen`` (HOST:PORT, port 0 picks one) in a daemon
    thread; returns the server (``shutdown()`` stops it) and its bound address."""
    from prometheus_client import start_http_server

    host, _, port = listen.rpartition(":")
    try:
        server, _thread = start_http_server(int(port), addr=host, registry=metrics.registry)
    except OSError as exc:  # in use, not local, not resolvable
        raise CannotListen(f"cannot serve metrics on {listen}: {exc.strerror or exc}") from exc
    bound = server.server_address[1]
    return server, f"{host}:{bound}"
