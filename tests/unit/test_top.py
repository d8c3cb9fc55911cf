"""``tfprof-collector top``: rates between two scrapes, shares of a GPU, sorting and
filtering, the scrape's errors, ``--once`` and the live view driven by textual's pilot,
all against a real collector metrics endpoint (CollectorMetrics served over HTTP, fed
through IngestStream with a real store)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from textual.widgets import DataTable

from tests.unit.live_records import UUID0, hello, kernel, records
from tfprof.collector.cli import main
from tfprof.collector.commands.top import parse_interval
from tfprof.collector.errors import InvalidArgument
from tfprof.collector.service.ingest import IngestStream
from tfprof.collector.service.metrics import CollectorMetrics, serve_metrics
from tfprof.collector.store import Store
from tfprof.collector.top.app import TopApp
from tfprof.collector.top.scrape import (
    MetricsUnavailable,
    Scrape,
    metrics_url,
    parse_metrics,
    read_metrics,
)
from tfprof.collector.top.snapshot import between
from tfprof.proto import collector_pb2 as pb

pytestmark = pytest.mark.timeout(60)


def scrape(at: float, busy: dict[tuple[str, str, str], float], **more: object) -> Scrape:
    return Scrape(at, busy_seconds=busy, kernels={k: 10 * v for k, v in busy.items()}, **more)  # type: ignore[arg-type]


def test_rates_and_shares_of_a_shared_gpu() -> None:
    a, b = ("alpha", "n1", "GPU-1"), ("beta", "n1", "GPU-1")
    first = scrape(10.0, {a: 1.0, b: 5.0})
    second = scrape(
        12.0,
        {a: 2.5, b: 5.5, ("alpha", "n2", "GPU-2"): 0.4},
        processes={"alpha": 3.0, "beta": 1.0},
        dropped={"beta": 7.0},
        copy_bytes={("alpha", "n1", "GPU-1", "HtoD"): 4e9},
    )
    snap = between(first, second)
    assert snap.interval_s == 2.0
    gpu1 = next(g for g in snap.gpus if g.gpu_uuid == "GPU-1")
    assert gpu1.busy_percent == pytest.approx(100 * (1.5 + 0.5) / 2)
    assert [(s.job, round(s.share_percent)) for s in gpu1.jobs] == [("alpha", 75), ("beta", 25)]
    assert gpu1.busy_seconds_total == pytest.approx(8.0)
    alpha = next(j for j in snap.jobs if j.job == "alpha")
    # A series new in the second scrape counts whole: it started inside the interval.
    assert alpha.busy_percent == pytest.approx(100 * (1.5 + 0.4) / 2)
    assert alpha.kernels_per_s == pytest.approx(10 * 1.9 / 2)
    assert alpha.copy_gb_per_s == pytest.approx(2.0)
    assert alpha.processes == 3 and alpha.gpus == ("GPU-1", "GPU-2")
    assert next(j for j in snap.jobs if j.job == "beta").dropped_total == 7


def test_a_counter_that_went_down_was_reset_and_counts_from_zero() -> None:
    key = ("j", "h", "G")
    snap = between(scrape(0.0, {key: 100.0}), scrape(1.0, {key: 0.25}))
    assert snap.jobs[0].busy_percent == pytest.approx(25.0)


def test_sorting_and_filtering() -> None:
    busy = {("big", "n1", "GPU-1"): 0.9, ("small", "n2", "GPU-2"): 0.1, ("mid", "n2", "GPU-2"): 0.5}
    snap = between(scrape(0.0, {}), scrape(1.0, busy, dropped={"small": 9.0}))
    assert [j.job for j in snap.jobs] == ["big", "mid", "small"]
    assert [j.job for j in snap.sorted_by("drops").jobs] == ["small", "big", "mid"]
    assert [j.job for j in snap.sorted_by("name").jobs] == ["big", "mid", "small"]
    only = snap.matching("SMA")  # any case; the GPU it ran on is kept, with its jobs
    assert [j.job for j in only.jobs] == ["mid", "small"]
    assert [g.gpu_uuid for g in only.gpus] == ["GPU-2"]
    by_host = snap.matching("n1")
    assert [g.gpu_uuid for g in by_host.gpus] == ["GPU-1"]
    assert [j.job for j in by_host.jobs] == ["big"]
    assert snap.matching("nothing-like-it").jobs == ()


def test_addresses_and_intervals_are_checked() -> None:
    assert metrics_url("127.0.0.1:9317") == "http://127.0.0.1:9317/metrics"
    assert metrics_url("[::1]:9317") == "http://[::1]:9317/metrics"
    assert metrics_url("http://h:1") == "http://h:1/metrics"
    assert metrics_url("http://h:1/other") == "http://h:1/other"
    for bad in ("localhost", "h:port", "grpc://h:1", ":9317", "h:70000"):
        with pytest.raises(InvalidArgument, match="--metrics-url"):
            metrics_url(bad)
    assert parse_interval("1s") == 1.0
    assert parse_interval("250ms") == 0.25
    assert parse_interval("2") == 2.0
    for bad in ("0", "soon", "2h"):
        with pytest.raises(InvalidArgument, match="--interval"):
            parse_interval(bad)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreachable_or_wrong_endpoint_is_one_clear_error() -> None:
    with pytest.raises(MetricsUnavailable, match=r"cannot read http://127\.0\.0\.1:"):
        read_metrics(f"http://127.0.0.1:{closed_port()}/metrics", timeout=5)
    # Something that answers, but not HTTP (a gRPC port, say).
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()

        def answer() -> None:
            conn, _ = server.accept()
            conn.recv(1024)
            conn.sendall(b"\x00\x00\x12\x04\x00\x00\x00\x00\x00garbage")
            conn.close()

        threading.Thread(target=answer, daemon=True).start()
        with pytest.raises(MetricsUnavailable, match="cannot read"):
            read_metrics(f"http://127.0.0.1:{server.getsockname()[1]}/metrics", timeout=5)


class LiveCollector:
    """A real metrics endpoint, fed through the real ingest path."""

    def __init__(self, tmp_path: Path) -> None:
        self.metrics = CollectorMetrics()
        self.store = Store(tmp_path / "data")
        self.http, self.address = serve_metrics(self.metrics, "127.0.0.1:0")
        self.streams: list[IngestStream] = []
        self.seq: dict[str, int] = {}

    def open(self, job: str, devices: list[pb.Device] | None = None) -> IngestStream:
        ingest = IngestStream(self.store, self.metrics)
        ingest.hello(hello(job, f"{job}-{len(self.streams)}", devices))
        self.streams.append(ingest)
        return ingest

    def feed(self, ingest: IngestStream, *rows: dict[str, int]) -> None:
        key = ingest.hello_msg.stream_id if ingest.hello_msg else ""
        self.seq[key] = self.seq.get(key, 0) + 1
        ingest.batch(pb.Batch(seq=self.seq[key], records=records(*rows)))

    def close(self) -> None:
        for s in self.streams:
            s.close()
        self.http.shutdown()


@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveCollector]:
    c = LiveCollector(tmp_path)
    yield c
    c.close()


def test_parsing_a_real_exposition(live: LiveCollector) -> None:
    stream = live.open("alpha", [pb.Device(ordinal=0, uuid=UUID0)])
    live.feed(stream, kernel(0, 2_000_000), kernel(1_000_000, 2_000_000))
    got = parse_metrics(live.metrics.exposition().decode(), 1.0)
    assert got.busy_seconds == {("alpha", "node-a", UUID0): pytest.approx(0.003)}
    assert got.kernels == {("alpha", "node-a", UUID0): 2}
    assert got.processes == {"alpha": 1}


def test_once_json_reads_the_endpoint(
    live: LiveCollector, capsys: pytest.CaptureFixture[str]
) -> None:
    live.feed(live.open("alpha"), kernel(0, 1_000))
    live.feed(live.open("beta"), kernel(0, 3_000), kernel(10_000, 1_000))
    argv = [
        "top",
        "--metrics-url",
        live.address,
        "--once",
        "--format",
        "json",
        "--interval",
        "50ms",
    ]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["collector"] == metrics_url(live.address)
    assert "on demand" in out["note"]
    jobs = {j["job"]: j for j in out["jobs"]}
    assert jobs["beta"]["kernels_total"] == 2
    assert jobs["beta"]["busy_seconds_total"] == pytest.approx(4e-6)
    assert jobs["alpha"]["processes"] == 1
    (gpu,) = out["gpus"]  # no UUIDs: both are node-a/gpu:0
    assert gpu["gpu_uuid"] == "node-a/gpu:0"
    assert {s["job"] for s in gpu["jobs"]} == {"alpha", "beta"}


def test_once_table_and_a_dead_endpoint(
    live: LiveCollector, capsys: pytest.CaptureFixture[str]
) -> None:
    live.feed(live.open("alpha"), kernel(0, 1_000))
    assert main(["top", "--metrics-url", live.address, "--once", "--interval", "50ms"]) == 0
    out = capsys.readouterr().out
    assert "on demand" in out.splitlines()[0]
    assert "alpha" in out and "node-a/gpu:0" in out and "BUSY %" in out
    assert main(["top", "--metrics-url", f"127.0.0.1:{closed_port()}", "--once"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("tfprof-collector: cannot read http://")


def test_the_live_view_refreshes_sorts_filters_and_quits(live: LiveCollector) -> None:
    alpha = live.open("alpha", [pb.Device(ordinal=0, uuid=UUID0)])
    beta = live.open("beta")
    live.feed(alpha, kernel(0, 1_000))
    live.feed(beta, kernel(0, 1_000))
    url = metrics_url(live.address)
    app = TopApp(lambda: read_metrics(url), live.address, interval_s=0.1)

    def jobs_shown() -> list[str]:
        table = app.query_one("#jobs", DataTable)
        return [str(table.get_row_at(i)[0]) for i in range(table.row_count)]

    async def drive() -> None:
        async with app.run_test() as pilot:
            # Rates need two scrapes; records arriving between them show as busy.
            while app.snapshot is None:
                await pilot.pause(0.05)
            for i in range(5):
                live.feed(alpha, kernel(10_000 * (i + 1), 50_000_000))
            while not any(j.kernels_per_s for j in app.shown().jobs):
                await pilot.pause(0.05)
            assert jobs_shown()[0] == "alpha"  # sorted by busy %
            assert app.query_one("#gpus", DataTable).row_count == 2
            assert "on demand" in str(app.query_one("#note").render())
            await pilot.press("s", "s", "s", "s", "s")  # busy → ... → name
            assert app.sort == "name" and jobs_shown() == ["alpha", "beta"]
            await pilot.press("slash", "b", "e", "t", "enter")
            assert app.filter_text == "bet"
            assert jobs_shown() == ["beta"]
            await pilot.press("q")
        assert not app.is_running

    asyncio.run(drive())


def test_ctrl_c_quits_even_while_typing_a_filter(live: LiveCollector) -> None:
    url = metrics_url(live.address)
    app = TopApp(lambda: read_metrics(url), live.address, interval_s=0.1)

    async def drive() -> None:
        async with app.run_test() as pilot:
            await pilot.press("slash", "q")  # q goes into the filter, not to quit
            assert app.is_running and app.filter_text == "q"
            await pilot.press("ctrl+c")
        assert not app.is_running

    asyncio.run(drive())


def test_a_dead_endpoint_shows_in_the_status_line_and_the_view_keeps_running() -> None:
    url = f"http://127.0.0.1:{closed_port()}/metrics"
    app = TopApp(lambda: read_metrics(url, timeout=5), "dead", interval_s=0.1)

    async def drive() -> None:
        async with app.run_test() as pilot:
            while app.error is None:
                await pilot.pause(0.05)
            assert "retrying" in str(app.query_one("#status").render())
            await pilot.press("q")

    asyncio.run(drive())


def test_the_live_view_off_a_terminal_points_at_once(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["top", "--collector", "127.0.0.1:9317"]) == 2  # stdout is captured here
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "tfprof-collector: the live view needs a terminal; use --once (with --format json "
        "for scripts)"
    ]
