"""Many tiny kernels: most kernels of a job run for a few microseconds, about what it
costs the CPU to launch one, so the job is launch-bound rather than compute-bound."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tfprof.collector.advice.base import Finding, share, tracks, tracks_query, us
from tfprof.collector.read.needs import Got, Query, Sweep

NAME = "tiny-kernels"
TINY_NS = 10_000  # kernels shorter than 10 us
MIN_TINY = 1_000  # at least this many of them
MIN_TINY_SHARE = 0.5  # making up at least half of the job's kernels
LAUNCH_COST_NS = 5_000  # typical CPU cost of one launch: the impact estimate per kernel


def _queries() -> tuple[Query, Query, Query]:
    """Per job: kernels, tiny ones, their time, first start and last end; per (job,
    kernel name): tiny ones, and when the name was first seen (ties in count go to the
    name seen first); the tiny ones' tracks."""
    tiny = f"d < {TINY_NS}"
    kernels = Query(
        f"SELECT job, count(*), count(*) FILTER (WHERE {tiny}), coalesce(sum(d) FILTER "
        f"(WHERE {tiny}), 0), min(s) FILTER (WHERE {tiny}), max(e) FILTER (WHERE {tiny}) "
        "FROM {g} WHERE kind = 1 GROUP BY job"
    )
    names = Query(
        "SELECT job, coalesce(name, ''), count(*), min(s) FROM {g} "
        f"WHERE kind = 1 AND {tiny} GROUP BY ALL"
    )
    return kernels, names, tracks_query(f"kind = 1 AND {tiny}", "job")


@dataclass(frozen=True)
class TinyKernels:
    name: str = NAME

    def queries(self) -> Sequence[Query]:
        return _queries()

    def sweeps(self) -> Sequence[Sweep[Any]]:
        return ()

    def build(self, got: Got) -> list[Finding]:
        read = got.read
        kernel_counts, tiny_names, found = _queries()
        shown = tracks(read, got.rows(found))
        names: dict[int, list[tuple[int, int, str]]] = {}
        for j, name, n, first in got.rows(tiny_names):
            names.setdefault(int(j), []).append((-int(n), int(first), name))
        findings = []
        for j, kernels, n, total, first, last in sorted(got.rows(kernel_counts)):
            kernels, n = int(kernels), int(n)
            if n < MIN_TINY or n < MIN_TINY_SHARE * max(kernels, 1):
                continue
            top = sorted(names[j])[:3]
            job = read.jobs[j].label
            findings.append(
                Finding(
                    rule=NAME,
                    title=f"job {job}: {n:,} kernels ({share(n, kernels)}% of its "
                    f"kernels) run under {TINY_NS // 1000} us: launch-bound",
                    impact_us=us(n * LAUNCH_COST_NS),
                    evidence={
                        "tiny_kernels": n,
                        "kernels": kernels,
                        "tiny_pct": share(n, kernels),
                        "tiny_total_us": us(total),
                        "tiny_avg_us": us(int(total) / n),
                        "most_frequent": [{"name": k, "count": -c} for c, _, k in top],
                    },
                    suggestion=(
                        "Fuse small kernels and amortise launches: compile with XLA "
                        "(jit_compile=True) or torch.compile, capture steady-state steps in "
                        "CUDA graphs, and raise the batch size so each kernel does more work."
                    ),
                    start_ns=int(first),
                    end_ns=int(last),
                    jobs=(job,),
                    streams=shown[j],
                )
            )
        return findings


RULE = TinyKernels()
