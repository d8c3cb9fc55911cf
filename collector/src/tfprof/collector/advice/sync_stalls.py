"""Synchronisation stalls: time the host spent waiting in CUDA synchronisation calls
(CUPTI SYNCHRONIZATION records), per job, and what the GPU was doing meanwhile."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tfprof.collector.advice.base import SPANS, Finding, job_spans, share, tracks, tracks_query, us
from tfprof.collector.read.job_covers import JobCovers
from tfprof.collector.read.needs import Got, Query, Sweep
from tfprof.core.cupti_labels import SYNC_TYPES

NAME = "sync-stalls"
MIN_SHARE_OF_SPAN = 0.05  # host waits adding up to 5% of the job's span
MIN_WAIT_NS = 100_000
# Per job: syncs, their time, the longest and when it began (the first of the longest),
# first start, last end.
SYNCS = Query(
    "SELECT job, count(*), sum(d), max(d), min(s) FILTER (WHERE d = longest), min(s), max(e) "
    "FROM (SELECT *, max(d) OVER (PARTITION BY job) AS longest FROM {g} WHERE kind = 4) "
    "GROUP BY job"
)
BY_TYPE = Query("SELECT job, sync_type, sum(d) FROM {g} WHERE kind = 4 GROUP BY ALL")
TRACKS = tracks_query("kind = 4", "job")


@dataclass(frozen=True)
class SyncStalls:
    name: str = NAME

    def queries(self) -> Sequence[Query]:
        return (SYNCS, BY_TYPE, TRACKS, SPANS)

    def sweeps(self) -> Sequence[Sweep[Any]]:
        return (JobCovers(),)

    def build(self, got: Got) -> list[Finding]:
        read = got.read
        gpu_during = got.swept(JobCovers()).syncs
        spans = job_spans(got)
        shown = tracks(read, got.rows(TRACKS))
        by_type: dict[int, dict[str, float]] = {}
        for j, t, ns in sorted(got.rows(BY_TYPE)):
            by_type.setdefault(int(j), {})[SYNC_TYPES.label(int(t))] = us(ns)
        findings = []
        for j, n, total, longest, longest_at, first, last in sorted(got.rows(SYNCS)):
            total = int(total)
            lo, hi = spans[j]
            span = hi - lo
            if total < MIN_WAIT_NS or total < MIN_SHARE_OF_SPAN * span:
                continue
            busy = int(gpu_during[j])
            job = read.jobs[j].label
            findings.append(
                Finding(
                    rule=NAME,
                    title=f"job {job}: the host waited {us(total):,.0f} us in {int(n):,} "
                    f"synchronisations ({share(total, span)}% of its span)",
                    impact_us=us(total),
                    evidence={
                        "syncs": int(n),
                        "wait_us": us(total),
                        "wait_pct_of_span": share(total, span),
                        "longest_us": us(longest),
                        "longest_at_ns": int(longest_at),
                        "by_type_us": by_type[j],
                        "gpu_busy_during_waits_pct": share(busy, total),
                    },
                    suggestion=(
                        "Remove synchronisations from the step: avoid reading GPU values on "
                        "the host each step (.item(), .numpy(), printing losses), blocking "
                        "copies and explicit cudaDeviceSynchronize/cudaStreamSynchronize; use "
                        "events and stream waits to order work instead."
                    ),
                    start_ns=int(first),
                    end_ns=int(last),
                    jobs=(job,),
                    streams=shown[j],
                )
            )
        return findings


RULE = SyncStalls()
