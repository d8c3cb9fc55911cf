"""What every rule shares: the finding it reports, the interface it declares, and the
figures several rules read.

A rule is a ``Need`` of the read engine (``tfprof.collector.read``) whose result is its
findings: it declares SQL queries and sweeps, and builds findings from what the read
found (``Rule``). ``advise`` hands every chosen rule to one read, so a query or sweep
two rules declare (the jobs' spans, the GPUs' busy time) runs once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from tfprof.collector.analysis.units import us
from tfprof.collector.read.engine import SPANS, Read
from tfprof.collector.read.needs import Got, Query, Sweep
from tfprof.core.tracks import TrackKey

WORK = (1, 2, 3)  # kernels, copies, memsets: what occupies a GPU (syncs are host waits)
TRACKS_SHOWN = 8


@dataclass(frozen=True)
class Finding:
    rule: str
    title: str
    # Time at stake (us), the ranking key: what the rule estimates could be won back.
    impact_us: float
    evidence: dict[str, Any]
    suggestion: str
    start_ns: int  # the time window the evidence comes from (collector clock)
    end_ns: int
    jobs: tuple[str, ...] = ()
    streams: tuple[str, ...] = field(default_factory=tuple)  # timeline track names (TrackKey)


class Rule(Protocol):
    """An advice rule: ``name`` (what ``--rule`` takes) and a read engine ``Need`` whose
    result is its findings."""

    @property
    def name(self) -> str: ...

    def queries(self) -> Sequence[Query]: ...

    def sweeps(self) -> Sequence[Sweep[Any]]: ...

    def build(self, got: Got) -> list[Finding]: ...


def share(part: float, whole: float) -> float:
    return round(100.0 * part / whole, 1) if whole else 0.0


def job_gpu_spans(got: Got) -> dict[tuple[int, int], tuple[int, int]]:
    """Per (job, listed GPU): the first start and last end of the job's kernels, copies
    and memsets there (``engine.SPANS``, which the rule declares)."""
    read = got.read
    spans: dict[tuple[int, int], tuple[int, int]] = {}
    for job, process, device, kind, _, _, _, first, last in got.rows(SPANS):
        if kind not in WORK:
            continue
        key = (int(job), read.gpu_of[(int(process), int(device))])
        lo, hi = spans.get(key, (int(first), int(last)))
        spans[key] = (min(lo, int(first)), max(hi, int(last)))
    return spans


def job_spans(got: Got) -> dict[int, tuple[int, int]]:
    """Per job: the first start and last end of any of its GPU records (host waits
    too), from ``engine.SPANS``."""
    spans: dict[int, tuple[int, int]] = {}
    for job, _, _, _, _, _, _, first, last in got.rows(SPANS):
        lo, hi = spans.get(int(job), (int(first), int(last)))
        spans[int(job)] = (min(lo, int(first)), max(hi, int(last)))
    return spans


def tracks_query(where: str, by: str) -> Query:
    """The records ``where`` holds (SQL over ``{g}``) counted per group ``by`` (columns,
    comma separated) and track: what ``tracks`` reads."""
    return Query(
        f"SELECT {by}, process, device, stream, count(*) FROM {{g}} WHERE {where} GROUP BY ALL"
    )


def tracks(
    read: Read, rows: Iterable[tuple[Any, ...]], groups: int = 1
) -> dict[Any, tuple[str, ...]]:
    """Per group (the first ``groups`` columns of ``tracks_query``'s rows; a tuple when
    more than one): the names of its records' timeline tracks, at most
    ``TRACKS_SHOWN``, busiest first (ties in process, device, stream order)."""
    found: dict[Any, list[tuple[int, int, int, int]]] = {}
    for row in rows:
        key = row[0] if groups == 1 else tuple(row[:groups])
        process, device, stream, n = (int(v) for v in row[groups:])
        found.setdefault(key, []).append((-n, process, device, stream))
    out = {}
    for key, counted in found.items():
        counted.sort()
        out[key] = tuple(
            track(read, p, d & 0xFF, s).format() for _, p, d, s in counted[:TRACKS_SHOWN]
        )
    return out


def track(read: Read, process: int, device: int, stream: int) -> TrackKey:
    """The timeline track of records of ``process`` on ``device`` and ``stream``."""
    ref = read.processes[process]
    return TrackKey.for_stream(read.jobs[ref.job].label, ref.task, device, stream)


__all__ = ["SPANS", "Finding", "Rule", "job_gpu_spans", "job_spans", "share", "tracks", "us"]
