"""The ``api`` view: per CUDA API function (runtime and driver), how often it was called
and for how long, as ``nsys stats``' cuda_api_sum shows it, and how many calls failed
(a return value other than 0: ``cudaSuccess`` / ``CUDA_SUCCESS``).

``ApiNeed`` reads it through the read engine (one SQL GROUP BY: exact counts and sums,
the median of the two middle values, the standard deviation from exact sums of squares,
as the kernels view)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tfprof.collector.analysis.units import pct, us
from tfprof.collector.analysis.view_rows import ViewRows
from tfprof.collector.read.needs import Got, Query, Sweep

NAME_FIELD = "name"
TIME_FIELD = "total_us"
NO_API = "no CUDA API records: the trace has none, or --api was off"
# API ``category``: which API the call belongs to (CUPTI RUNTIME or DRIVER activity).
API_LABELS = {1: "runtime", 2: "driver"}


@dataclass(frozen=True)
class ApiRow:
    name: str
    api: str  # runtime, driver ("" when the source does not say)
    calls: int
    total_us: float
    time_pct: float  # of the time in every API call listed
    avg_us: float
    median_us: float
    min_us: float
    max_us: float
    stddev_us: float  # sample standard deviation (n - 1), 0 for one call
    errors: int  # calls that returned an error code


# Per API function: its API (runtime, driver), count, total, min, max, median, sum of
# squares, errors.
CALLS = Query(
    "SELECT coalesce(name, ''), max(category), count(*), sum(d), min(d), max(d), median(d), "
    "sum(d::HUGEINT * d), count(*) FILTER (WHERE return_value <> 0) FROM {h} WHERE kind = 5 "
    "GROUP BY 1"
)


@dataclass(frozen=True)
class ApiNeed:
    def queries(self) -> Sequence[Query]:
        return (CALLS,)

    def sweeps(self) -> Sequence[Sweep[Any]]:
        return ()

    def build(self, got: Got) -> ViewRows:
        found = got.rows(CALLS)
        everything = float(sum(int(r[3]) for r in found))
        rows = []
        for name, category, n, total, low, high, median, squares, errors in found:
            n, total = int(n), int(total)
            spread = (n * int(squares) - total * total) / (n * max(n - 1, 1))
            rows.append(
                ApiRow(
                    name=name,
                    api=API_LABELS.get(int(category), ""),
                    calls=n,
                    total_us=us(total),
                    time_pct=pct(total, everything),
                    avg_us=us(total / n),
                    median_us=us(median),
                    min_us=us(low),
                    max_us=us(high),
                    stddev_us=us(math.sqrt(spread)),
                    errors=int(errors),
                )
            )
        rows.sort(key=lambda r: (-r.total_us, r.name))
        return ViewRows(rows, () if found else (NO_API,))
