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
from tfprof.collector.analysis.launch import LAUNCH_CALLS, LINKED_SELECT
from tfprof.collector.read.needs import Got, Query, Sweep

NAME = "launch-bound"
RATIO = 0.5  # CPU launch time at least half the kernel time it launched
MIN_LAUNCHES = 50  # kernels linked to their launching call, first launches left out
MIN_LAUNCH_NS = 1_000_000  # 1 ms of launch time at least
# Linked kernels but each (job, kernel name)'s first launch: its earliest (of those
# starting then, the first in process order, then launch order). Kernels link to their
# calls within one process, so ``linked`` is made a group of processes at a time and
# gathered (``read.process_groups``): at 64 ranks x 1M kernels, one statement over every
# rank's records ran out of the read's memory limit (bench/results/cpu-dist-scale.txt).
_KEY = "{'s': l.s, 'p': l.process, 'c': l.correlation}"  # a kernel's launch order
_STEADY = (
    "SELECT l.* FROM linked l JOIN firsts f ON f.job = l.job AND f.name = l.name "
    f"WHERE {_KEY} <> f.k"
)
_STAGES = f"""
WITH calls AS ({LAUNCH_CALLS}),
linked AS ({LINKED_SELECT}),
firsts AS (SELECT job, name, min({_KEY}) AS k FROM linked l GROUP BY job, name),
-- one row per call that launched a steady kernel: its figures depend on the call alone
steady_calls AS (
    SELECT DISTINCT job, link, correlation, call_d, call_name, call_s FROM ({_STEADY}) AS k
)"""


def median_stages(name: str, rows: str, column: str) -> str:
    """Stages ``name`` (per job: the two middle values of ``column`` over ``rows``, as
    ``lo``, ``hi``): from the count of each value, not DuckDB's ``median``, which holds
    every value of a group at once (a job's 64M kernels: more than the read's limit)."""
    return f""",
{name}_n AS (SELECT job, {column} AS v, count(*) AS n FROM ({rows}) AS r GROUP BY job, {column}),
{name}_c AS (
    SELECT job, v, sum(n) OVER (PARTITION BY job ORDER BY v ROWS UNBOUNDED PRECEDING) AS upto,
           sum(n) OVER (PARTITION BY job) AS total
    FROM {name}_n
),
{name} AS (
    SELECT job, min(v) FILTER (WHERE upto > (total - 1) // 2) AS lo,
           min(v) FILTER (WHERE upto > total // 2) AS hi
    FROM {name}_c GROUP BY job
)"""


def _query(stages: str, final: str) -> Query:
    return Query(_STAGES + stages + "\n" + final, gather="linked")


# Per job: steady kernels, their time, median time and launch latency, first, last.
KERNELS = _query(
    median_stages("kernel_median", _STEADY, "d")
    + median_stages("latency_median", _STEADY, "latency"),
    "SELECT k.job, count(*), sum(k.d), (m.lo + m.hi) / 2, (x.lo + x.hi) / 2, min(k.s), max(k.e) "
    f"FROM ({_STEADY}) AS k JOIN kernel_median m ON m.job = k.job "
    "JOIN latency_median x ON x.job = k.job GROUP BY k.job, m.lo, m.hi, x.lo, x.hi",
)
# Per job: the calls that launched them, each once: count, time, median time.
CALLS = _query(
    median_stages("call_median", "SELECT * FROM steady_calls", "call_d"),
    "SELECT c.job, count(*), sum(c.call_d), (m.lo + m.hi) / 2 FROM steady_calls c "
    "JOIN call_median m ON m.job = c.job GROUP BY c.job, m.lo, m.hi",
)
# Per (job, API function): those calls, and when the first began (the evidence's order).
CALL_NAMES = _query(
    "", "SELECT job, call_name, count(*), min(call_s) FROM steady_calls GROUP BY ALL"
)
TRACKS = _query(
    "", f"SELECT job, process, device, stream, count(*) FROM ({_STEADY}) AS k GROUP BY ALL"
)


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
