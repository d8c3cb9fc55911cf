"""One read of the collector's live figures, reduced to the per-job/GPU counters.

From either door to the same figures (collector/service/live_figures.py): the
LiveFigures call on the collector's gRPC address (``read_live``, what ``top`` uses by
default, wherever gRPC reaches), or the ``tfprof_*`` families of its Prometheus endpoint
(``read_metrics``, what Grafana reads; ``top --metrics-url``).
"""

from __future__ import annotations

import http.client
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client.parser import text_string_to_metric_families

from tfprof.collector.errors import CollectorError, InvalidArgument

if TYPE_CHECKING:
    from tfprof.collector.service.remote import Remote
    from tfprof.proto import collector_pb2 as pb

GpuSeries = tuple[str, str, str]  # (job, host, gpu uuid)
CopySeries = tuple[str, str, str, str]  # (job, host, gpu uuid, direction)
RankSeries = tuple[str, str, str]  # (job, rank, host)
MAX_BYTES = 64 << 20  # a scrape of 1,000 jobs on 64 GPUs each is a few MB


class MetricsUnavailable(CollectorError):
    """The figures cannot be read now: no collector answers, or the metrics endpoint is
    down or not a Prometheus endpoint."""


@dataclass(frozen=True)
class Scrape:
    """Counter and gauge values of one scrape; ``at`` is time.monotonic() of the read."""

    at: float
    busy_seconds: dict[GpuSeries, float] = field(default_factory=dict)
    kernels: dict[GpuSeries, float] = field(default_factory=dict)
    copies: dict[CopySeries, float] = field(default_factory=dict)
    copy_bytes: dict[CopySeries, float] = field(default_factory=dict)
    dropped: dict[str, float] = field(default_factory=dict)  # job -> records, all reasons
    processes: dict[str, float] = field(default_factory=dict)  # job -> streams open
    # Per rank over the job's last minutes (gauges): steady step time, mean arrival skew.
    step_seconds: dict[RankSeries, float] = field(default_factory=dict)
    skew_seconds: dict[RankSeries, float] = field(default_factory=dict)


def metrics_url(address: str) -> str:
    """``HOST:PORT`` (or a whole ``http://`` URL) of the metrics endpoint as a URL."""
    if "://" in address:
        parsed = urllib.parse.urlsplit(address)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise InvalidArgument(f"--metrics-url {address!r}: not an http(s) URL")
        return address if parsed.path not in ("", "/") else f"{address.rstrip('/')}/metrics"
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidArgument(
            f"--metrics-url {address!r}: not HOST:PORT of the collector's metrics endpoint "
            "(the address `serve --metrics-listen` prints)"
        )
    return f"http://{host}:{port}/metrics"


def read_metrics(url: str, timeout: float = 5.0) -> Scrape:
    """Fetch and parse one scrape of ``url``."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            body = reply.read(MAX_BYTES + 1)
    except urllib.error.HTTPError as exc:
        raise MetricsUnavailable(f"cannot read {url}: HTTP {exc.code} {exc.reason}") from exc
    except urllib.error.URLError as exc:
        reason = getattr(exc.reason, "strerror", None) or exc.reason
        raise MetricsUnavailable(f"cannot read {url}: {reason}") from exc
    except (OSError, http.client.HTTPException) as exc:
        raise MetricsUnavailable(f"cannot read {url}: {exc or type(exc).__name__}") from exc
    if len(body) > MAX_BYTES:
        raise MetricsUnavailable(f"{url} sent more than {MAX_BYTES >> 20} MiB")
    try:
        return parse_metrics(body.decode("utf-8"), time.monotonic())
    except (UnicodeDecodeError, ValueError) as exc:
        raise MetricsUnavailable(f"{url} is not a Prometheus metrics endpoint: {exc}") from exc


def parse_metrics(text: str, at: float) -> Scrape:
    """The tfprof_* per-job families of a Prometheus text exposition."""
    scrape = Scrape(at)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels, value = sample.labels, float(sample.value)
            job = labels.get("job", "")
            gpu = (job, labels.get("host", ""), labels.get("gpu_uuid", ""))
            copy = (*gpu, labels.get("direction", ""))
            rank = (job, labels.get("rank", ""), labels.get("host", ""))
            if sample.name == "tfprof_gpu_busy_seconds_total":
                scrape.busy_seconds[gpu] = value
            elif sample.name == "tfprof_kernels_total":
                scrape.kernels[gpu] = value
            elif sample.name == "tfprof_copies_total":
                scrape.copies[copy] = value
            elif sample.name == "tfprof_copy_bytes_total":
                scrape.copy_bytes[copy] = value
            elif sample.name == "tfprof_records_dropped_total":
                scrape.dropped[job] = scrape.dropped.get(job, 0.0) + value
            elif sample.name == "tfprof_processes":
                scrape.processes[job] = value
            elif sample.name == "tfprof_step_seconds":
                scrape.step_seconds[rank] = value
            elif sample.name == "tfprof_arrival_skew_seconds":
                scrape.skew_seconds[rank] = value
    return scrape


def scrape_of(reply: pb.LiveFiguresReply, at: float) -> Scrape:
    """The LiveFigures reply as the counters a scrape of the same moment holds."""
    scrape = Scrape(at)
    for job in reply.jobs:
        scrape.processes[job.job] = float(job.processes)
        if job.dropped:  # as the exposition, which has a series only for what was counted
            scrape.dropped[job.job] = float(sum(d.records for d in job.dropped))
        for gpu in job.gpus:
            key = (job.job, gpu.host, gpu.gpu_uuid)
            scrape.busy_seconds[key] = gpu.busy_ns / 1e9
            scrape.kernels[key] = float(gpu.kernels)
            for c in gpu.copies:
                scrape.copies[(*key, c.direction)] = float(c.copies)
                scrape.copy_bytes[(*key, c.direction)] = float(c.bytes)
        for r in job.ranks:
            scrape.step_seconds[(job.job, r.rank, r.host)] = r.step_ns / 1e9
            scrape.skew_seconds[(job.job, r.rank, r.host)] = r.skew_ns / 1e9
    return scrape


def read_live(remote: Remote, timeout: float = 5.0) -> Scrape:
    """One LiveFigures call; ``MetricsUnavailable`` when no collector answers, the
    call's own error (a refused token, ...) otherwise."""
    import grpc

    from tfprof.collector.service.remote import Unreachable
    from tfprof.proto import collector_pb2 as pb

    try:
        reply = remote.stub.LiveFigures(
            pb.LiveFiguresRequest(), metadata=remote.metadata, timeout=timeout
        )
    except grpc.RpcError as exc:
        error = remote.error(exc, "top")
        if isinstance(error, Unreachable):
            raise MetricsUnavailable(str(error)) from None
        raise error from None
    return scrape_of(reply, time.monotonic())
