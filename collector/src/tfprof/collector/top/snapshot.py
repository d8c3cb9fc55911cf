"""Two scrapes ``interval`` apart as rows: per physical GPU and per job, with rates.

A rate is a counter's increase over the interval (a counter that went down was reset,
e.g. the collector restarted or forgot the job: its new value is the increase, as
Prometheus' ``rate`` reads it). Totals are the second scrape's values.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:  # `top --help` stays light: the scrape side imports urllib and parsers
    from tfprof.collector.top.scrape import GpuSeries, Scrape

NOTE = (
    "live figures come from the records being captured now: a job traced on demand "
    "shows nothing until a capture runs"
)
# --sort keys: what orders the job table (GPUs follow busy %, or names for "name").
SORT_KEYS = ("busy", "kernels", "copy", "drops", "processes", "name")

K = TypeVar("K")
Series = TypeVar("Series", bound=tuple[str, ...])


@dataclass(frozen=True)
class JobShare:
    """One job's part of one GPU."""

    job: str
    busy_percent: float  # of the interval, on this GPU
    share_percent: float  # of this GPU's busy time in the interval
    busy_seconds_total: float
    kernels_total: float


@dataclass(frozen=True)
class GpuRow:
    host: str
    gpu_uuid: str
    busy_percent: float  # sum of its jobs' (each its GPU union: passes 100 only when jobs share it)
    kernels_per_s: float
    busy_seconds_total: float
    kernels_total: float
    jobs: tuple[JobShare, ...]  # busiest first


@dataclass(frozen=True)
class JobRow:
    job: str
    processes: int
    busy_percent: float  # summed over its GPUs
    kernels_per_s: float
    copy_bytes_per_s: float
    dropped_total: float
    dropped_per_s: float
    busy_seconds_total: float
    kernels_total: float
    copies_total: float
    copy_bytes_total: float
    gpus: tuple[str, ...]  # the UUIDs it ran on
    # Over the job's last minutes (the collector's per-rank figures; None: no complete
    # step there yet): its slowest rank's steady step time, and the rank the others
    # waited for most at collectives, with its mean arrival skew.
    step_seconds: float | None = None
    slowest_rank: str | None = None
    slowest_skew_seconds: float | None = None

    @property
    def copy_gb_per_s(self) -> float:
        return self.copy_bytes_per_s / 1e9


@dataclass(frozen=True)
class Snapshot:
    interval_s: float
    gpus: tuple[GpuRow, ...]
    jobs: tuple[JobRow, ...]

    def matching(self, text: str) -> Snapshot:
        """Jobs whose name, GPUs whose host, UUID or a job's name contain ``text`` (any
        case); an empty ``text`` keeps everything."""
        needle = text.strip().lower()
        if not needle:
            return self
        gpus = tuple(
            g
            for g in self.gpus
            if needle in g.host.lower()
            or needle in g.gpu_uuid.lower()
            or any(needle in s.job.lower() for s in g.jobs)
        )
        on_gpus = {s.job for g in gpus for s in g.jobs}
        jobs = tuple(j for j in self.jobs if needle in j.job.lower() or j.job in on_gpus)
        return Snapshot(self.interval_s, gpus, jobs)

    def sorted_by(self, key: str) -> Snapshot:
        if key not in SORT_KEYS:
            raise ValueError(f"unknown sort key {key!r}")
        if key == "name":
            jobs = sorted(self.jobs, key=lambda j: j.job)
            gpus = sorted(self.gpus, key=lambda g: (g.host, g.gpu_uuid))
            return Snapshot(self.interval_s, tuple(gpus), tuple(jobs))
        jobs = sorted(self.jobs, key=lambda j: (-_SORT_VALUE[key](j), j.job))
        gpus = sorted(self.gpus, key=lambda g: (-g.busy_percent, g.host, g.gpu_uuid))
        return Snapshot(self.interval_s, tuple(gpus), tuple(jobs))


_SORT_VALUE: dict[str, Callable[[JobRow], float]] = {
    "busy": lambda j: j.busy_percent,
    "kernels": lambda j: j.kernels_per_s,
    "copy": lambda j: j.copy_bytes_per_s,
    "drops": lambda j: j.dropped_total,
    "processes": lambda j: float(j.processes),
}


def _increase(before: Mapping[K, float], after: Mapping[K, float]) -> dict[K, float]:
    out = {}
    for key, value in after.items():
        old = before.get(key, 0.0)
        out[key] = value - old if value >= old else value
    return out


def _by_job(values: Mapping[Series, float]) -> dict[str, float]:
    """Sum of ``values`` per job (the first part of their key)."""
    out: dict[str, float] = {}
    for key, value in values.items():
        out[key[0]] = out.get(key[0], 0.0) + value
    return out


def between(first: Scrape, second: Scrape) -> Snapshot:
    """Rows for what happened between two scrapes, sorted by busy %."""
    interval = max(second.at - first.at, 1e-9)
    busy = _increase(first.busy_seconds, second.busy_seconds)
    kernels = _increase(first.kernels, second.kernels)
    copy_bytes = _increase(first.copy_bytes, second.copy_bytes)
    dropped = _increase(first.dropped, second.dropped)
    series = set(second.busy_seconds) | set(second.kernels)

    gpu_keys = sorted({(host, uuid) for _job, host, uuid in series})
    gpus = []
    for host, uuid in gpu_keys:
        mine: list[GpuSeries] = sorted(s for s in series if s[1:] == (host, uuid))
        busy_here = sum(busy.get(s, 0.0) for s in mine)
        shares = [
            JobShare(
                job=s[0],
                busy_percent=100 * busy.get(s, 0.0) / interval,
                share_percent=100 * busy.get(s, 0.0) / busy_here if busy_here else 0.0,
                busy_seconds_total=second.busy_seconds.get(s, 0.0),
                kernels_total=second.kernels.get(s, 0.0),
            )
            for s in mine
        ]
        shares.sort(key=lambda s: (-s.busy_percent, -s.busy_seconds_total, s.job))
        gpus.append(
            GpuRow(
                host=host,
                gpu_uuid=uuid,
                busy_percent=100 * busy_here / interval,
                kernels_per_s=sum(kernels.get(s, 0.0) for s in mine) / interval,
                busy_seconds_total=sum(second.busy_seconds.get(s, 0.0) for s in mine),
                kernels_total=sum(second.kernels.get(s, 0.0) for s in mine),
                jobs=tuple(shares),
            )
        )

    names = set(second.processes) | set(second.dropped) | {s[0] for s in series}
    rate = {"busy": _by_job(busy), "kernels": _by_job(kernels), "bytes": _by_job(copy_bytes)}
    total = {
        "busy": _by_job(second.busy_seconds),
        "kernels": _by_job(second.kernels),
        "copies": _by_job(second.copies),
        "bytes": _by_job(second.copy_bytes),
    }
    jobs = [
        JobRow(
            job=name,
            processes=int(second.processes.get(name, 0)),
            busy_percent=100 * rate["busy"].get(name, 0.0) / interval,
            kernels_per_s=rate["kernels"].get(name, 0.0) / interval,
            copy_bytes_per_s=rate["bytes"].get(name, 0.0) / interval,
            dropped_total=second.dropped.get(name, 0.0),
            dropped_per_s=dropped.get(name, 0.0) / interval,
            busy_seconds_total=total["busy"].get(name, 0.0),
            kernels_total=total["kernels"].get(name, 0.0),
            copies_total=total["copies"].get(name, 0.0),
            copy_bytes_total=total["bytes"].get(name, 0.0),
            gpus=tuple(sorted({s[2] for s in series if s[0] == name})),
            **_ranks(second, name),
        )
        for name in names | {r[0] for r in second.step_seconds}
    ]
    return Snapshot(interval, tuple(gpus), tuple(jobs)).sorted_by("busy")


def _ranks(scrape: Scrape, job: str) -> dict[str, Any]:
    """A job's step time (its slowest rank's) and the rank with the largest mean arrival
    skew (then the longest step), as the collector's rank board orders them."""
    steps = {r: v for r, v in scrape.step_seconds.items() if r[0] == job}
    if not steps:
        return {}
    slowest = min(steps, key=lambda r: (-scrape.skew_seconds.get(r, 0.0), -steps[r], r[1]))
    return {
        "step_seconds": max(steps.values()),
        "slowest_rank": slowest[1],
        "slowest_skew_seconds": scrape.skew_seconds.get(slowest, 0.0),
    }


def job_names(rows: Iterable[JobShare]) -> str:
    """``alpha 60%, beta 40%``: the jobs sharing a GPU, busiest first."""
    return ", ".join(f"{s.job} {s.share_percent:.0f}%" for s in rows)
