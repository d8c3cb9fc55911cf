"""Host<->device copies not overlapped with compute: copy time during which no kernel ran
on the same GPU, per job."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tfprof.collector.advice.base import SPANS, Finding, job_spans, share, tracks, tracks_query, us
from tfprof.collector.read.job_covers import JobCovers
from tfprof.collector.read.needs import Got, Query, Sweep

NAME = "copy-overlap"
HOST_DEVICE = (1, 2)  # HtoD, DtoH
MAX_OVERLAP_SHARE = 0.5  # report when less than half of the copy time overlaps
MIN_SHARE_OF_SPAN = 0.05  # and exposed copies take at least 5% of the job's span
_COPIES = "kind = 2 AND copy_kind IN (1, 2)"
# Per job: host<->device copies, their time, bytes, time per direction, first and last.
COPIES = Query(
    "SELECT job, count(*), sum(d), sum(bytes), coalesce(sum(d) FILTER (WHERE copy_kind = 1), 0), "
    f"coalesce(sum(d) FILTER (WHERE copy_kind = 2), 0), min(s), max(e) FROM {{g}} WHERE {_COPIES} "
    "GROUP BY job"
)
TRACKS = tracks_query(_COPIES, "job")


@dataclass(frozen=True)
class CopyOverlap:
    name: str = NAME

    def queries(self) -> Sequence[Query]:
        return (COPIES, TRACKS, SPANS)

    def sweeps(self) -> Sequence[Sweep[Any]]:
        return (JobCovers(),)

    def build(self, got: Got) -> list[Finding]:
        read = got.read
        overlap = got.swept(JobCovers()).copies
        spans = job_spans(got)
        shown = tracks(read, got.rows(TRACKS))
        findings = []
        for j, n, total, nbytes, htod, dtoh, first, last in sorted(got.rows(COPIES)):
            total, over = int(total), int(overlap[j])
            exposed = total - over
            lo, hi = spans[j]
            span = hi - lo
            if total == 0 or over > MAX_OVERLAP_SHARE * total or exposed < MIN_SHARE_OF_SPAN * span:
                continue
            job = read.jobs[j].label
            findings.append(
                Finding(
                    rule=NAME,
                    title=f"job {job}: {share(exposed, total)}% of host<->device copy time "
                    "runs with no kernel on the GPU",
                    impact_us=us(exposed),
                    evidence={
                        "copies": int(n),
                        "bytes": int(nbytes),
                        "copy_us": us(total),
                        "overlapped_us": us(over),
                        "overlapped_pct": share(over, total),
                        "exposed_us": us(exposed),
                        "exposed_pct_of_span": share(exposed, span),
                        "HtoD_us": us(htod),
                        "DtoH_us": us(dtoh),
                    },
                    suggestion=(
                        "Make copies asynchronous and overlap them with kernels: pinned host "
                        "buffers, cudaMemcpyAsync on a dedicated copy stream, and prefetching "
                        "the next batch while the current one computes (tf.data "
                        "prefetch_to_device, DataLoader pin_memory=True + non_blocking=True)."
                    ),
                    start_ns=int(first),
                    end_ns=int(last),
                    jobs=(job,),
                    streams=shown[j],
                )
            )
        return findings


RULE = CopyOverlap()
