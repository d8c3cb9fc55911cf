"""Per job and rank, what the ranks view and the straggler rule say of a job's last
minutes: steady step time, mean arrival skew at collectives, exposed communication.

The collector reads them from its own data dir every ``--rank-figures-interval``
seconds (the lake's segments and the streams' log tails: what running jobs sent up to
now), for the jobs ``LiveAccounting`` holds, over the trailing ``WINDOW_S``: the same
SQL as ``summary --view ranks`` (``lake.dist_sql.STEPS``) and arrivals matched by
process group, step and order in the step (``collective_sql.WINDOW_ARRIVALS``: a window
cuts ranks at different calls). One read per refresh covers every job; its cost is the
window's records, never a whole run.

Cardinality is bounded as the per-GPU families are: jobs are those ``LiveAccounting``
keeps (its ``max_jobs`` and ``retain_s``), and at most ``max_ranks`` ranks per job are
exposed, the latest arrivers first (the ones a straggler hunt needs); ``rank_count``
says how many the job has.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfprof.collector.analysis.step_rows import STEPS_QUERY, rank_rows
from tfprof.collector.lake.collective_sql import WINDOW_ARRIVAL_COLUMNS, WINDOW_ARRIVALS
from tfprof.collector.lake.dist_sql import ENGINE
from tfprof.collector.read.needs import Got, Query, Sweep
from tfprof.collector.service.live_figures import OTHER, LiveAccounting
from tfprof.proto import collector_pb2 as pb

WINDOW_S = 120.0
MAX_RANKS = 64
WINDOW_QUERY = Query(ENGINE.bind(WINDOW_ARRIVALS), gather="calls_out")


@dataclass(frozen=True)
class RankFigures:
    """One rank of one job over the window."""

    rank: str  # the task label: RANK as the process declared it
    host: str
    steps: int  # complete steps in the window
    step_ns: int  # steady steps' p50 (its slowest GPU's, for a rank with several)
    exposed_fraction: float  # exposed communication / the complete steps' device time
    collectives: int  # calls matched across ranks in the window
    skew_ns: int  # mean of its arrival less the earliest rank's, over those calls
    last: int  # calls it arrived last at (by more than collective_sql.TIE_NS)


@dataclass(frozen=True)
class JobRanks:
    ranks: tuple[RankFigures, ...]  # the latest arrivers first, at most ``max_ranks``
    rank_count: int

    def slowest(self) -> RankFigures | None:
        """The rank the others waited for most: largest mean skew, then step time."""
        return self.ranks[0] if self.ranks else None

    def step_ns(self) -> int:
        """The job's step time: its slowest rank's (every rank waits for it)."""
        return max((r.step_ns for r in self.ranks), default=0)


def _order(r: RankFigures) -> tuple[int, int, str]:
    return (-r.skew_ns, -r.step_ns, r.rank)


@dataclass(frozen=True)
class RankFiguresNeed:
    """Per job name: its ranks' figures over the read's window."""

    def queries(self) -> Sequence[Query]:
        return (STEPS_QUERY, WINDOW_QUERY)

    def sweeps(self) -> Sequence[Sweep[Any]]:
        return ()

    def build(self, got: Got) -> dict[str, list[RankFigures]]:
        read = got.read
        label_name = {j.label: j.name for j in read.jobs}
        arrivals: dict[tuple[str, str], dict[str, Any]] = {}
        for row in got.rows(WINDOW_QUERY):
            values = dict(zip(WINDOW_ARRIVAL_COLUMNS, row, strict=True))
            ref = read.processes[int(values["rk"])]
            arrivals[(read.jobs[ref.job].name, ref.task)] = values
        best: dict[tuple[str, str], RankFigures] = {}
        for r in rank_rows(got):
            job = label_name[r.job]
            a = arrivals.get((job, r.task))
            matched = int(a["matched"]) if a else 0
            figures = RankFigures(
                rank=r.task,
                host=r.host,
                steps=r.steps,
                step_ns=round(r.step_p50_us * 1000),
                exposed_fraction=r.comm_exposed_pct / 100,
                collectives=matched,
                skew_ns=round(int(a["skew_sum"]) / matched) if a and matched else 0,
                last=int(a["last"]) if a else 0,
            )
            known = best.get((job, r.task))
            if known is None or figures.step_ns > known.step_ns:
                best[(job, r.task)] = figures
        out: dict[str, list[RankFigures]] = {}
        for (job, _task), figures in best.items():
            out.setdefault(job, []).append(figures)
        return out


def read_ranks(
    data_dirs: Sequence[str], jobs: Sequence[str], since_ns: int | None
) -> dict[str, list[RankFigures]]:
    """The figures of the newest run of each of ``jobs`` from ``since_ns`` on."""
    from tfprof.collector.lake.reader import open_jobs
    from tfprof.collector.read import engine
    from tfprof.collector.read.lake_catalog import catalog
    from tfprof.collector.store.catalog import job_names
    from tfprof.collector.timeline.prepare import TimeWindow

    # A job that has sent nothing yet has no run to open (open_jobs refuses unknown names).
    stored = {name for d in data_dirs for name in job_names(Path(d) / "jobs")}
    names = [j for j in jobs if j in stored]
    if not names:
        return {}
    newest = {j.name: j for j in open_jobs(data_dirs, names).jobs}  # runs oldest first
    cat = catalog(list(newest.values()), TimeWindow(since_ns, None))
    _read, (out,) = engine.read(cat, [RankFiguresNeed()])
    figures: dict[str, list[RankFigures]] = out
    return figures


class RankBoard:
    """The latest figures per job, as the metrics and LiveFigures expose them."""

    def __init__(self, max_ranks: int = MAX_RANKS) -> None:
        self.max_ranks = max_ranks
        self._jobs: dict[str, JobRanks] = {}
        self._lock = threading.Lock()

    def update(self, figures: dict[str, list[RankFigures]], jobs: Iterable[str]) -> None:
        """The jobs' new figures; a job of ``jobs`` without figures (no complete step in
        the window) loses its old ones, as does a job no longer listed."""
        board = {}
        for job in jobs:
            ranks = sorted(figures.get(job, ()), key=_order)
            if ranks:
                board[job] = JobRanks(tuple(ranks[: self.max_ranks]), len(ranks))
        with self._lock:
            self._jobs = board

    def snapshot(self) -> dict[str, JobRanks]:
        with self._lock:
            return dict(self._jobs)


def refresh(
    board: RankBoard,
    live: LiveAccounting,
    data_dirs: Sequence[str],
    window_s: float = WINDOW_S,
    clock: Callable[[], int] = time.time_ns,
) -> None:
    """One refresh of ``board`` for the jobs ``live`` holds now."""
    jobs = sorted(j for j in live.snapshot() if j != OTHER)
    figures = read_ranks(data_dirs, jobs, clock() - round(window_s * 1e9)) if jobs else {}
    board.update(figures, jobs)


def add_ranks(reply: pb.LiveFiguresReply, board: dict[str, JobRanks]) -> pb.LiveFiguresReply:
    """``live_reply``'s jobs with their ranks' figures (a job with figures but no live
    entry, forgotten since the last refresh, is left out)."""
    for job in reply.jobs:
        ranks = board.get(job.job)
        if ranks is None:
            continue
        job.rank_count = ranks.rank_count
        for r in ranks.ranks:
            job.ranks.add(rank=r.rank, host=r.host, steps=r.steps, step_ns=r.step_ns,
                          comm_exposed_ratio=r.exposed_fraction, collectives=r.collectives,
                          skew_ns=r.skew_ns, last=r.last)  # fmt: skip
    return reply
