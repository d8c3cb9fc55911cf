"""The ``kernels`` view: per kernel name (optionally per job and name), how often it ran,
for how long, and its share of the GPUs' busy time.

``KernelsNeed`` reads it through the read engine: the per-name figures from one SQL
GROUP BY (exact integers; the median DuckDB's, the mean of the two middle values), the
GPUs' busy time from one sweep. ``kernel_rows`` computes the same over a ``RecordSet``
(the embedded collector's summary, and the tests' oracle) until that goes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tfprof.collector.analysis.intervals import group_keys
from tfprof.collector.analysis.record_set import RecordSet, gpu_busy
from tfprof.collector.analysis.units import pct, us
from tfprof.collector.read.gpu_sweeps import GpuBusy, GpuIdle
from tfprof.collector.read.needs import Got, Query, Sweep
from tfprof.core.records import RecordKind

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


def kernel_rows(rs: RecordSet, per_job: bool = False) -> list[KernelRow]:
    # The GPUs' busy time first: its temporaries are gone before the kernels' are made.
    busy = int(gpu_busy(rs).busy.sum())
    k = rs.mask(RecordKind.KERNEL)
    names = rs.name[k]
    dur = rs.end[k] - rs.start[k]
    if per_job:
        inverse, keys = group_keys(rs.job[k], names)
    else:
        inverse, keys = group_keys(names)
    groups = keys.shape[0]
    count = np.bincount(inverse, minlength=groups)
    total = np.bincount(inverse, weights=dur, minlength=groups)
    low = np.full(groups, np.iinfo(np.int64).max, dtype=np.int64)
    high = np.zeros(groups, dtype=np.int64)
    np.minimum.at(low, inverse, dur)
    np.maximum.at(high, inverse, dur)
    median, stddev = _spread(inverse, dur, count, total)
    kernel_total = float(total.sum())
    rows = []
    for i in range(groups):
        job = rs.jobs[int(keys[i, 0])].label if per_job else ""
        name = rs.names[int(keys[i, -1])] or UNNAMED
        n = int(count[i])
        rows.append(
            KernelRow(
                name=name,
                job=job,
                count=n,
                total_us=us(total[i]),
                avg_us=us(total[i] / n),
                min_us=us(low[i]),
                max_us=us(high[i]),
                gpu_busy_pct=pct(total[i], busy),
                kernel_time_pct=pct(total[i], kernel_total),
                median_us=us(median[i]),
                stddev_us=us(stddev[i]),
            )
        )
    rows.sort(key=lambda r: (-r.total_us, r.job, r.name))
    return rows


def _spread(
    inverse: np.ndarray, dur: np.ndarray, count: np.ndarray, total: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per group: the median and the sample standard deviation of ``dur``."""
    groups = count.shape[0]
    if not groups:
        return np.zeros(0), np.zeros(0)
    order = np.lexsort((dur, inverse))  # by group, then by duration
    first = np.concatenate(([0], np.cumsum(count)[:-1]))
    ranked = dur[order]
    low = ranked[first + (count - 1) // 2]
    high = ranked[first + count // 2]
    median = (low + high) / 2.0
    mean = total / count
    squares = np.bincount(inverse, weights=(dur - mean[inverse]) ** 2, minlength=groups)
    stddev = np.sqrt(squares / np.maximum(count - 1, 1))
    return median, stddev
