"""The ``launch`` view: per kernel name, how long launches took and waited, as HTA's
kernel launch statistics (``get_cuda_kernel_launch_stats``).

For each kernel linked to the API call that launched it (same correlation id, same
process): launch latency = kernel start - call end (negatives, clock noise, as 0, as
HTA does); CPU launch time = the call's duration; queue depth = records of its stream
launched earlier and not yet started when its call began (HTA's queue length less the
kernel itself: 0 means the GPU was waiting for this launch).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tfprof.collector.analysis.api import NO_API
from tfprof.collector.analysis.group_stats import group_stats
from tfprof.collector.analysis.intervals import group_keys
from tfprof.collector.analysis.records import RecordSet
from tfprof.collector.analysis.units import us
from tfprof.core.records import RecordKind

NAME_FIELD = "name"
TIME_FIELD = "launch_cpu_us"


@dataclass(frozen=True)
class LaunchRow:
    name: str
    kernels: int  # kernels linked to their launching call
    latency_avg_us: float
    latency_median_us: float
    latency_p95_us: float  # nearest rank
    latency_max_us: float
    launch_cpu_us: float  # total time in the launching calls
    launch_cpu_avg_us: float
    launch_cpu_max_us: float
    queue_avg: float
    queue_max: int


def linked_kernels(rs: RecordSet) -> np.ndarray:
    """Rows of kernels with a launching API call."""
    return np.flatnonzero((rs.kind == RecordKind.KERNEL) & (rs.api >= 0))


def launch_rows(rs: RecordSet) -> list[LaunchRow]:
    k = linked_kernels(rs)
    inverse, keys = group_keys(rs.name[k])
    groups = int(keys.shape[0])
    latency = group_stats(inverse, rs.latency[k], groups)
    cpu = group_stats(inverse, rs.host.duration[rs.api[k]], groups)
    queue = group_stats(inverse, rs.queue[k], groups)
    rows = [
        LaunchRow(
            name=rs.names[int(keys[g, 0])] or "unnamed kernel",
            kernels=int(latency.count[g]),
            latency_avg_us=us(latency.mean[g]),
            latency_median_us=us(latency.median[g]),
            latency_p95_us=us(latency.p95[g]),
            latency_max_us=us(latency.high[g]),
            launch_cpu_us=us(cpu.total[g]),
            launch_cpu_avg_us=us(cpu.mean[g]),
            launch_cpu_max_us=us(cpu.high[g]),
            queue_avg=round(float(queue.mean[g]), 2),
            queue_max=int(queue.high[g]),
        )
        for g in range(groups)
    ]
    rows.sort(key=lambda r: (-r.launch_cpu_us, r.name))
    return rows


def launch_notes(rs: RecordSet) -> tuple[str, ...]:
    kernels = int(np.count_nonzero(rs.kind == RecordKind.KERNEL))
    linked = int(linked_kernels(rs).shape[0])
    if not (rs.host.kind == RecordKind.API).any():
        return (f"no kernel launch to show: {NO_API}",)
    if linked < kernels:
        return (
            f"{kernels - linked:,} of {kernels:,} kernels have no launching API call in the "
            "window (correlation id unknown, or the call was not traced)",
        )
    return ()
