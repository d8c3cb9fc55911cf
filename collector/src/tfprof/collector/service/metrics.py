"""Prometheus metrics of the collector, served over HTTP by ``--metrics-listen``.

One ``CollectorMetrics`` per server, each with its own registry (tests run several
servers in one process). Ingest and the servicer call its small methods; nothing here
knows about gRPC or files.

Besides the collector's own counters (``tfprof_collector_*``), the ``tfprof_*`` families
below say per job and GPU what the ingested records hold (collector/service/live_figures.py computes
them); ``tfprof-collector top`` and the Grafana board read these.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tfprof.collector.errors import CannotListen
from tfprof.collector.service.live_figures import LiveAccounting
from tfprof.collector.service.rank_figures import MAX_RANKS, WINDOW_S, RankBoard

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

PREFIX = "tfprof_collector"
GPU_LABELS = ["job", "host", "gpu_uuid"]
RANK_LABELS = ["job", "rank", "host"]
# Per job and GPU (counters gain the ``_total`` suffix when exposed). Help texts say what
# is counted; top and deploy/grafana read these names.
LIVE_FAMILIES: dict[str, tuple[str, str, list[str]]] = {
    "tfprof_gpu_busy_seconds": (
        "counter",
        "GPU busy time from that job's records: the union of its kernels', copies' and "
        "memsets' intervals on that GPU (as summary and advise count it; at most 1 per "
        "second)",
        GPU_LABELS,
    ),
    "tfprof_stream_busy_seconds": (
        "counter",
        "kernel time on that GPU from that job's records, per CUDA stream: the union of "
        "kernel intervals per stream summed over streams (the rate may pass 1)",
        GPU_LABELS,
    ),
    "tfprof_kernels": ("counter", "kernel records of that job on that GPU", GPU_LABELS),
    "tfprof_copies": (
        "counter",
        "memcpy records of that job on that GPU, by direction (HtoD, DtoH, DtoD, PtoP...)",
        [*GPU_LABELS, "direction"],
    ),
    "tfprof_copy_bytes": (
        "counter",
        "bytes copied by that job's memcpy records on that GPU, by direction",
        [*GPU_LABELS, "direction"],
    ),
    "tfprof_records_dropped": (
        "counter",
        "records of that job lost before they were stored, by where (queue, tracer, relay)",
        ["job", "reason"],
    ),
    "tfprof_processes": ("gauge", "traced processes of that job streaming now", ["job"]),
    # Per job and rank over the job's last minutes (service/rank_figures.py), refreshed
    # every --rank-figures-interval seconds.
    "tfprof_step_seconds": (
        "gauge",
        "that rank's steady step time (p50 of its complete steps in the last "
        f"{WINDOW_S:.0f} seconds, warm-up steps left out; as summary --view ranks)",
        RANK_LABELS,
    ),
    "tfprof_arrival_skew_seconds": (
        "gauge",
        "that rank's mean arrival skew at the collectives matched across the job's ranks "
        "in the window: its kernel's start less the earliest rank's (a straggler's is "
        "largest)",
        RANK_LABELS,
    ),
    "tfprof_comm_exposed_ratio": (
        "gauge",
        "that rank's communication time no compute kernel overlapped, over its complete "
        "steps' device time in the window (0 to 1)",
        RANK_LABELS,
    ),
    "tfprof_ranks": (
        "gauge",
        "ranks of that job with a complete step in the window (the per-rank families "
        f"keep the latest arrivers, at most {MAX_RANKS})",
        ["job"],
    ),
}


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
        self.live = LiveAccounting()
        self.ranks = RankBoard()
        r.register(_LiveFamilies(self.live, self.ranks))

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


class _LiveFamilies(Collector):
    """Exposes ``LiveAccounting``'s figures at each scrape (series of forgotten jobs
    disappear with them)."""

    def __init__(self, live: LiveAccounting, ranks: RankBoard) -> None:
        self._live = live
        self._ranks = ranks

    def describe(self) -> Iterator[Metric]:
        yield from _families().values()

    def collect(self) -> Iterator[Metric]:
        families = _families()
        busy, kernels = families["tfprof_gpu_busy_seconds"], families["tfprof_kernels"]
        copies, copy_bytes = families["tfprof_copies"], families["tfprof_copy_bytes"]
        for job, figures in sorted(self._live.snapshot().items()):
            families["tfprof_processes"].add_metric([job], figures.processes)
            for reason, n in sorted(figures.dropped.items()):
                families["tfprof_records_dropped"].add_metric([job, reason], n)
            for (host, uuid), gpu in sorted(figures.gpus.items()):
                labels = [job, host, uuid]
                busy.add_metric(labels, gpu.busy_ns / 1e9)
                families["tfprof_stream_busy_seconds"].add_metric(labels, gpu.stream_busy_ns / 1e9)
                kernels.add_metric(labels, gpu.kernels)
                for direction, n in sorted(gpu.copies.items()):
                    copies.add_metric([*labels, direction], n)
                    copy_bytes.add_metric([*labels, direction], gpu.copy_bytes[direction])
        for job, ranks in sorted(self._ranks.snapshot().items()):
            families["tfprof_ranks"].add_metric([job], ranks.rank_count)
            for r in ranks.ranks:
                labels = [job, r.rank, r.host]
                families["tfprof_step_seconds"].add_metric(labels, r.step_ns / 1e9)
                families["tfprof_arrival_skew_seconds"].add_metric(labels, r.skew_ns / 1e9)
                families["tfprof_comm_exposed_ratio"].add_metric(labels, r.exposed_fraction)
        yield from families.values()


def _families() -> dict[str, CounterMetricFamily | GaugeMetricFamily]:
    out: dict[str, CounterMetricFamily | GaugeMetricFamily] = {}
    for name, (kind, doc, labels) in LIVE_FAMILIES.items():
        family = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
        out[name] = family(name, doc, labels=labels)
    return out


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
