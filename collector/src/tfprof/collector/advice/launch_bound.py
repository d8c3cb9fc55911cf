"""Launch-bound work: the CPU spends about as long launching kernels as the GPU spends
running them, so the GPU waits for the host (CUDA API records link each kernel to its
launching call).

Steady state only: each kernel name's first launch is left out, as it carries one-off
costs (module loading, autotuning) that fusing or CUDA graphs would not remove.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tfprof.collector.advice.base import Finding, share, tracks, us
from tfprof.collector.analysis.launch import LINKED_KERNELS
from tfprof.collector.read.needs import Got, Query, Sweep

NAME = "launch-bound"
RATIO = 0.5  # CPU launch time at least half the kernel time it launched
MIN_LAUNCHES = 50  # kernels linked to their launching call, first launches left out
MIN_LAUNCH_NS = 1_000_000  # 1 ms of launch time at least
# Linked kernels but each (job, kernel name)'s first launch: its earliest (of those
# starting then, the first in process order, then launch order).
_STEADY = f"""
WITH steady AS (
    SELECT * FROM (
        SELECT *, row_number() OVER (
            PARTITION BY job, name ORDER BY s, process, correlation) AS launch
        FROM ({LINKED_KERNELS}))
    WHERE launch > 1
)"""
# Per job: steady kernels, their time, median time and launch latency, first, last.
KERNELS = Query(
    f"{_STEADY} SELECT job, count(*), sum(d), median(d), median(latency), min(s), max(e) "
    "FROM steady GROUP BY job"
)
# Per job: the calls that launched them, each once: count, time, median time.
CALLS = Query(
    f"{_STEADY} SELECT job, count(*), sum(call_d), median(call_d) FROM (SELECT DISTINCT job, "
    "link, correlation, call_d FROM steady) GROUP BY job"
)
# Per (job, API function): those calls, and when the first began (the evidence's order).
CALL_NAMES = Query(
    f"{_STEADY} SELECT job, call_name, count(*), min(call_s) FROM (SELECT DISTINCT job, "
    "link, correlation, call_name, call_s FROM steady) GROUP BY ALL"
)
TRACKS = Query(f"{_STEADY} SELECT job, process, device, stream, count(*) FROM steady GROUP BY ALL")


@dataclass(frozen=True)
class LaunchBound:
    name: str = NAME

    def queries(self) -> Sequence[Query]:
        return (KERNELS, CALLS, CALL_NAMES, TRACKS)

    def sweeps(self) -> Sequence[Sweep[Any]]:
        return ()

    def build(self, got: Got) -> list[Finding]:
        read = got.read
        calls = {int(r[0]): r[1:] for r in got.rows(CALLS)}
        names: dict[int, list[tuple[int, str, int]]] = {}
        for j, name, n, first in got.rows(CALL_NAMES):
            names.setdefault(int(j), []).append((int(first), name, int(n)))
        shown = tracks(read, got.rows(TRACKS))
        findings = []
        for j, n, kernel, kernel_median, latency_median, first, last in sorted(got.rows(KERNELS)):
            n, kernel = int(n), int(kernel)
            n_calls, launch, launch_median = calls[j]
            launch = int(launch)
            if n < MIN_LAUNCHES or launch < MIN_LAUNCH_NS or launch < RATIO * kernel:
                continue
            job = read.jobs[j].label
            findings.append(
                Finding(
                    rule=NAME,
                    title=f"job {job}: launching {n:,} kernels (first launches left "
                    f"out) took {us(launch):,.0f} us "
                    f"of CPU, {share(launch, kernel)}% of their {us(kernel):,.0f} us on the GPU",
                    impact_us=us(launch),
                    evidence={
                        "kernels": n,
                        "launch_calls": int(n_calls),
                        "launch_cpu_us": us(launch),
                        "kernel_us": us(kernel),
                        "launch_to_kernel_pct": share(launch, kernel),
                        "launch_median_us": us(launch_median),
                        "kernel_median_us": us(kernel_median),
                        "latency_median_us": us(latency_median),
                        "calls": {k: c for _, k, c in sorted(names[j])},
                    },
                    suggestion=(
                        "Cut the number of launches: capture steady-state steps in CUDA "
                        "graphs (torch.cuda.graphs, XLA), fuse small ops (torch.compile, "
                        "jit_compile=True), and give each kernel more work (larger batches)."
                    ),
                    start_ns=int(first),
                    end_ns=int(last),
                    jobs=(job,),
                    streams=shown[j],
                )
            )
        return findings


RULE = LaunchBound()
