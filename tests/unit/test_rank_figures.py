"""The per-rank live figures (service/rank_figures.py) on two real ranks of the DDP trace
imported as one job, rank 1 stretched 1.3x: what the collector exposes as Prometheus
families and in LiveFigures, and what ``top`` makes of both."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.dist_traces import DIST, stretched
from tfprof.collector.analysis.step_rows import RanksNeed
from tfprof.collector.lake.reader import open_jobs
from tfprof.collector.read import engine
from tfprof.collector.read.lake_catalog import catalog
from tfprof.collector.service.live_figures import live_reply
from tfprof.collector.service.metrics import CollectorMetrics
from tfprof.collector.service.rank_figures import RankBoard, add_ranks, read_ranks, refresh
from tfprof.collector.timeline.prepare import TimeWindow
from tfprof.collector.top.scrape import parse_metrics, scrape_of
from tfprof.collector.top.screen import job_table, write_table
from tfprof.collector.top.snapshot import between
from tfprof.proto import collector_pb2 as pb

CLI = [sys.executable, "-m", "tfprof.collector.cli"]


@pytest.fixture(scope="module")
def ddp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data dir holding job ``ddp``: rank 0 as recorded, rank 1 stretched 1.3x."""
    tmp = tmp_path_factory.mktemp("ranks")
    src = DIST / "nccl_allreduce_rank0_of2.json.gz"
    stretched(src, tmp / "rank0.json.gz", 0, 1.0)
    stretched(src, tmp / "rank1.json.gz", 1, 1.3)
    subprocess.run([*CLI, "import", str(tmp / "rank0.json.gz"), str(tmp / "rank1.json.gz"),
                    "--job", "ddp", "--data-dir", str(tmp / "data")], check=True,
                   capture_output=True, timeout=300)  # fmt: skip
    return tmp / "data"


def _first_ns(data: Path) -> int:
    first = open_jobs([str(data)], ["ddp"]).first_event_ns()
    assert first is not None
    return first


def test_figures_are_the_ranks_view_and_the_straggler_rule(ddp: Path) -> None:
    ranks = {r.rank: r for r in read_ranks([str(ddp)], ["ddp"], None)["ddp"]}
    _read, (view,) = engine.read(catalog(open_jobs([str(ddp)]).jobs, TimeWindow()), [RanksNeed()])
    for row in view:
        assert ranks[row.task].step_ns == round(row.step_p50_us * 1000)
        assert ranks[row.task].exposed_fraction == pytest.approx(row.comm_exposed_pct / 100)
        assert ranks[row.task].steps == row.steps
    # as advise's straggler rule counts it: rank 1 last at all 21 collectives
    assert (ranks["1"].collectives, ranks["1"].last) == (21, 21)
    assert (ranks["0"].last, ranks["0"].skew_ns) == (0, 0)
    assert ranks["1"].skew_ns > 0
    assert ranks["1"].step_ns > ranks["0"].step_ns


@pytest.mark.parametrize("cut_ms", [150, 300])
def test_a_window_cut_never_pairs_different_collectives(ddp: Path, cut_ms: int) -> None:
    """Matching the k-th call of the window would pair rank 0's k-th collective with rank
    1's (k-1)-th once the cut drops a call of rank 0 only, and name rank 0 last."""
    since = _first_ns(ddp) + cut_ms * 10**6
    ranks = {r.rank: r for r in read_ranks([str(ddp)], ["ddp"], since)["ddp"]}
    assert ranks["0"].last == 0 and ranks["0"].skew_ns == 0
    assert 0 < ranks["1"].collectives < 21
    assert ranks["1"].last >= ranks["1"].collectives - 1  # one may fall within the tie
    assert ranks["1"].skew_ns > 0


def test_metrics_and_live_figures_carry_the_ranks(ddp: Path) -> None:
    metrics = CollectorMetrics()
    metrics.live.open_stream(pb.Hello(job="ddp", host="h"))
    metrics.live.open_stream(pb.Hello(job="idle", host="h"))
    # the collector's clock for the window: 120 s after the job's first record
    refresh(metrics.ranks, metrics.live, [str(ddp)], clock=lambda: _first_ns(ddp) + 10**11)
    text = metrics.exposition().decode()
    scrape = parse_metrics(text, 1.0)
    assert set(scrape.step_seconds) == {("ddp", "0", "imported"), ("ddp", "1", "imported")}
    assert metrics.value("tfprof_ranks", job="ddp") == 2
    assert 'tfprof_ranks{job="idle"}' not in text  # no step: no series
    exposed = metrics.value("tfprof_comm_exposed_ratio", job="ddp", rank="1", host="imported")
    assert 0 < exposed < 1
    assert scrape.skew_seconds[("ddp", "0", "imported")] == 0
    assert scrape.skew_seconds[("ddp", "1", "imported")] > 0
    # the gRPC door says the same as the Prometheus one
    reply = add_ranks(live_reply(metrics.live.snapshot()), metrics.ranks.snapshot())
    live = scrape_of(reply, 1.0)
    assert live.step_seconds == scrape.step_seconds
    assert live.skew_seconds == pytest.approx(scrape.skew_seconds)
    (job,) = [j for j in reply.jobs if j.job == "ddp"]
    assert job.rank_count == 2 and [r.rank for r in job.ranks] == ["1", "0"]


def test_ranks_are_bounded_per_job_and_follow_the_live_jobs(ddp: Path) -> None:
    figures = read_ranks([str(ddp)], ["ddp"], None)
    board = RankBoard(max_ranks=1)
    board.update(figures, ["ddp"])
    (only,) = board.snapshot()["ddp"].ranks
    assert only.rank == "1" and board.snapshot()["ddp"].rank_count == 2  # the latest arriver
    board.update(figures, [])  # the job was forgotten by the live accounting
    assert board.snapshot() == {}
    # out of the window: the job's series go
    board.update(read_ranks([str(ddp)], ["ddp"], _first_ns(ddp) + 10**12), ["ddp"])
    assert board.snapshot() == {}


def test_top_shows_step_time_and_the_slowest_rank(ddp: Path) -> None:
    metrics = CollectorMetrics()
    metrics.live.open_stream(pb.Hello(job="ddp", host="h"))
    refresh(metrics.ranks, metrics.live, [str(ddp)], clock=lambda: _first_ns(ddp) + 10**11)
    first = parse_metrics(metrics.exposition().decode(), 1.0)
    second = parse_metrics(metrics.exposition().decode(), 2.0)
    (row,) = between(first, second).jobs
    figures = {r.rank: r for r in metrics.ranks.snapshot()["ddp"].ranks}
    assert row.slowest_rank == "1"
    assert row.step_seconds == figures["1"].step_ns / 1e9
    assert row.slowest_skew_seconds == figures["1"].skew_ns / 1e9
    (cells,) = job_table(between(first, second)).rows
    assert cells[-2] == f"{figures['1'].step_ns / 1e6:,.1f}"
    assert cells[-1] == f"1 (+{figures['1'].skew_ns / 1e6:,.1f} ms)"
    out = io.StringIO()
    write_table(between(first, second), out)
    assert "SLOWEST RANK" in out.getvalue()
