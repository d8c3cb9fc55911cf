"""The ``api`` view: per CUDA API function (runtime and driver), how often it was called
and for how long, as ``nsys stats``' cuda_api_sum shows it, and how many calls failed
(a return value other than 0: ``cudaSuccess`` / ``CUDA_SUCCESS``).

``ApiNeed`` reads it through the read engine (one SQL GROUP BY: exact counts and sums,
the median of the two middle values, the standard deviation from exact sums of squares,
as the kernels view); ``api_rows`` computes it over a ``RecordSet`` (trace files)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tfprof.collector.analysis.group_stats import group_stats
from tfprof.collector.analysis.host_records import API_LABELS
from tfprof.collector.analysis.intervals import group_keys
from tfprof.collector.analysis.record_set import RecordSet
from tfprof.collector.analysis.units import pct, us
from tfprof.collector.analysis.view_rows import ViewRows
from tfprof.collector.read.needs import Got, Query, Sweep
from tfprof.core.records import RecordKind

NAME_FIELD = "name"
TIME_FIELD = "total_us"
NO_API = "no CUDA API records: the trace has none, or --api was off"


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


def api_rows(rs: RecordSet) -> list[ApiRow]:
    h = rs.host
    calls = np.flatnonzero(h.kind == RecordKind.API)
    dur = h.duration[calls]
    inverse, keys = group_keys(h.name[calls])
    groups = int(keys.shape[0])
    s = group_stats(inverse, dur, groups)
    errors = np.bincount(inverse[h.return_value[calls] != 0], minlength=groups)
    category = np.zeros(groups, dtype=np.int64)
    category[inverse] = h.category[calls]
    everything = float(dur.sum())
    rows = [
        ApiRow(
            name=rs.names[int(keys[g, 0])],
            api=API_LABELS.get(int(category[g]), ""),
            calls=int(s.count[g]),
            total_us=us(s.total[g]),
            time_pct=pct(s.total[g], everything),
            avg_us=us(s.mean[g]),
            median_us=us(s.median[g]),
            min_us=us(s.low[g]),
            max_us=us(s.high[g]),
            stddev_us=us(s.stddev[g]),
            errors=int(errors[g]),
        )
        for g in range(groups)
    ]
    rows.sort(key=lambda r: (-r.total_us, r.name))
    return rows


def api_notes(rs: RecordSet) -> tuple[str, ...]:
    return () if (rs.host.kind == RecordKind.API).any() else (NO_API,)
