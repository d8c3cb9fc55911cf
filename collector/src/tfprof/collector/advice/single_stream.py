"""Everything on one stream: a process whose kernels and copies on a GPU all go to one
CUDA stream, so no copy can ever overlap a kernel."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tfprof.collector.advice.base import Finding, track, us
from tfprof.collector.read.needs import Got, Query, Sweep

NAME = "single-stream"
MIN_KERNELS = 10
MIN_COPIES = 1
# Per (process, CUDA ordinal) of kernels, copies and memsets: streams used (one of them),
# kernels, copies, copy time, first start, last end.
WORK = Query(
    "SELECT process, device, count(DISTINCT stream), min(stream), "
    "count(*) FILTER (WHERE kind = 1), count(*) FILTER (WHERE kind = 2), "
    "coalesce(sum(d) FILTER (WHERE kind = 2), 0), min(s), max(e) "
    "FROM {g} WHERE kind <= 3 GROUP BY ALL"
)


@dataclass(frozen=True)
class SingleStream:
    name: str = NAME

    def queries(self) -> Sequence[Query]:
        return (WORK,)

    def sweeps(self) -> Sequence[Sweep[Any]]:
        return ()

    def build(self, got: Got) -> list[Finding]:
        read = got.read
        findings = []
        for process, device, streams, stream, kernels, copies, copy_ns, first, last in sorted(
            got.rows(WORK)
        ):
            if streams != 1 or kernels < MIN_KERNELS or copies < MIN_COPIES:
                continue
            ref = read.processes[process]
            job = read.jobs[ref.job].label
            key = track(read, process, device, stream)
            findings.append(
                Finding(
                    rule=NAME,
                    title=f"{key}: all {int(kernels):,} kernels and {int(copies):,} "
                    "copies of the process on this GPU share one stream",
                    impact_us=us(copy_ns),
                    evidence={
                        "stream": int(stream),
                        "kernels": int(kernels),
                        "copies": int(copies),
                        "copy_us": us(copy_ns),
                        "pid": ref.pid,
                        "task": ref.task,
                    },
                    suggestion=(
                        "Issue copies on a separate stream (cudaMemcpyAsync on a copy stream "
                        "with events, torch.cuda.Stream, TF's multi-stream input prefetch) "
                        "so transfers overlap compute; on the legacy default stream every "
                        "operation serialises."
                    ),
                    start_ns=int(first),
                    end_ns=int(last),
                    jobs=(job,),
                    streams=(key.format(),),
                )
            )
        return findings


RULE = SingleStream()
