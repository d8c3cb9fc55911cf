"""The ``kernels`` view: per kernel name (optionally per job and name), how often it ran,
for how long, and its share of the GPUs' busy time.

``KernelsNeed`` reads it through the read engine: the per-name figures from one SQL
GROUP BY (exact integers; the median DuckDB's, the mean of the two middle values), the
GPUs' busy time from one sweep.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tfprof.collector.analysis.units import pct, us
from tfprof.collector.read.gpu_sweeps import GpuBusy, GpuIdle
from tfprof.collector.read.needs import Got, Query, Sweep

NAME_FIELD = "name"
TIME_FIELD = "total_us"
UNNAMED = "unnamed kernel"


@dataclass(frozen=True)
class KernelRow:
    name: str
    job: str  # "" unless per job
    count: int
    total_us: float
    avg_us: float
    min_us: float
    max_us: float
    # total_us over the summed busy time (union of kernels, copies, memsets) of every
    # GPU in the window; kernels running concurrently can make the column add up past 100.
    gpu_busy_pct: float
    # total_us over the summed duration of every kernel listed: adds up to 100.
    kernel_time_pct: float
    median_us: float  # added after the fields above: CSV columns keep their positions
    stddev_us: float  # sample standard deviation (n - 1), as nsys stats; 0 for one run


# Per (job,) name: count, total, min, max, median, sum of squares (for the stddev). A
# kernel without a name (an empty one, or none in a file that predates names) is one.
_STATS = """
SELECT {by}, count(*), sum(d), min(d), max(d), median(d), sum(d::HUGEINT * d)
FROM (SELECT job, coalesce(name, '') AS name, d FROM {{g}} WHERE kind = 1) GROUP BY {by}"""


@dataclass(frozen=True)
class KernelsNeed:
    per_job: bool = False

    def queries(self) -> Sequence[Query]:
        return (Query(_STATS.format(by="job, name" if self.per_job else "name")),)

    def sweeps(self) -> Sequence[Sweep[GpuIdle]]:
        return (GpuBusy(),)

    def build(self, got: Got) -> list[KernelRow]:
        stats = got.rows(self.queries()[0])
        busy = int(got.swept(GpuBusy()).busy.sum())
        kernel_total = float(sum(int(r[-5]) for r in stats))
        jobs = got.read.jobs
        rows = []
        for r in stats:
            name, n, total, low, high, median, squares = r[-7:]
            n, total, squares = int(n), int(total), int(squares)
            # The sample variance from exact sums: one definition, whatever the order.
            spread = (n * squares - total * total) / (n * max(n - 1, 1))
            rows.append(
                KernelRow(
                    name=name or UNNAMED,
                    job=jobs[r[0]].label if self.per_job else "",
                    count=n,
                    total_us=us(total),
                    avg_us=us(total / n),
                    min_us=us(low),
                    max_us=us(high),
                    gpu_busy_pct=pct(total, busy),
                    kernel_time_pct=pct(total, kernel_total),
                    median_us=us(median),
                    stddev_us=us(math.sqrt(spread)),
                )
            )
        rows.sort(key=lambda r: (-r.total_us, r.job, r.name))
        return rows
