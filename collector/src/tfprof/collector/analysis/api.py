"""The ``api`` view: per CUDA API function (runtime and driver), how often it was called
and for how long, as ``nsys stats``' cuda_api_sum shows it, and how many calls failed
(a return value other than 0: ``cudaSuccess`` / ``CUDA_SUCCESS``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tfprof.collector.analysis.group_stats import group_stats
from tfprof.collector.analysis.host_records import API_LABELS
from tfprof.collector.analysis.intervals import group_keys
from tfprof.collector.analysis.records import RecordSet
from tfprof.collector.analysis.units import pct, us
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
