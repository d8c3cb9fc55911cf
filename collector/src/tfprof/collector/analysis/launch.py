"""The ``launch`` view: per kernel name, how long launches took and waited, as HTA's
kernel launch statistics (``get_cuda_kernel_launch_stats``).

For each kernel linked to the API call that launched it (same correlation id, same
process): launch latency = kernel start - call end (negatives, clock noise, as 0, as
HTA does); CPU launch time = the call's duration; queue depth = records of its stream
launched earlier and not yet started when its call began (HTA's queue length less the
kernel itself: 0 means the GPU was waiting for this launch).

``LaunchNeed`` reads it through the read engine: latency and CPU time per kernel name by
SQL (each kernel joined with the one call of its link group carrying its correlation id,
as ``read.launch_links`` links them; the 95th percentile by nearest rank), the queue
depths from the sweep that links launches in time order (``read.launch_totals``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tfprof.collector.analysis.api import NO_API
from tfprof.collector.analysis.units import us
from tfprof.collector.analysis.view_rows import ViewRows
from tfprof.collector.read.launch_totals import LaunchFigures, LaunchTotals
from tfprof.collector.read.needs import Got, Query, Sweep

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


# Each kernel with its launching call: the one API call of its link group in the window
# carrying its correlation id, started no later than the kernel (launch_links' rule).
LAUNCH_CALLS = """
    SELECT p.link, h.correlation, min(h.s) AS s, min(h.e) AS e, min(h.d) AS d,
           min(coalesce(h.name, '')) AS name, count(*) AS n
    FROM {h} h JOIN {p} p USING (process)
    WHERE h.kind = 5 AND h.correlation <> 0 GROUP BY ALL
"""
LINKED_SELECT = """
SELECT g.job, g.process, g.device, g.stream, p.link, g.correlation,
       coalesce(g.name, '') AS name, g.s, g.e, g.d, c.d AS call_d, c.s AS call_s,
       c.name AS call_name, greatest(g.s - c.e, 0) AS latency
FROM {g} g JOIN {p} p USING (process)
JOIN calls c ON c.link = p.link AND c.correlation = g.correlation
WHERE g.kind = 1 AND g.correlation <> 0 AND c.n = 1 AND c.s <= g.s
"""
LINKED_KERNELS = f"WITH calls AS ({LAUNCH_CALLS}) {LINKED_SELECT}"
# Per kernel name: linked kernels, latency total, median, 95th percentile (nearest rank),
# max; launch CPU time total and max.
STATS = Query(f"""
SELECT name, count(*), sum(latency), median(latency),
       max(latency) FILTER (WHERE rank <= greatest(ceil(0.95 * n), 1)), max(latency),
       sum(call_d), max(call_d)
FROM (SELECT name, latency, call_d,
             row_number() OVER (PARTITION BY name ORDER BY latency) AS rank,
             count(*) OVER (PARTITION BY name) AS n
      FROM ({LINKED_KERNELS}))
GROUP BY name""")
# Kernels in the window, those linked, and whether any API call is there.
COUNTS = Query(f"""
SELECT (SELECT count(*) FROM {{g}} WHERE kind = 1), (SELECT count(*) FROM ({LINKED_KERNELS})),
       (SELECT count(*) FROM {{h}} WHERE kind = 5)""")


@dataclass(frozen=True)
class LaunchNeed:
    def queries(self) -> Sequence[Query]:
        return (STATS, COUNTS)

    def sweeps(self) -> Sequence[Sweep[Any]]:
        return (LaunchTotals(),)

    def build(self, got: Got) -> ViewRows:
        f: LaunchFigures = got.swept(LaunchTotals())
        queued = {f.names[i]: i for i in np.flatnonzero(f.queue_count).tolist()}
        rows = []
        for name, n, latency, median, p95, high, cpu, cpu_high in got.rows(STATS):
            n, q = int(n), queued.get(name)
            count = int(f.queue_count[q]) if q is not None else 0
            queue_sum = int(f.queue_sum[q]) if q is not None else 0
            rows.append(
                LaunchRow(
                    name=name or "unnamed kernel",
                    kernels=n,
                    latency_avg_us=us(int(latency) / n),
                    latency_median_us=us(median),
                    latency_p95_us=us(p95),
                    latency_max_us=us(high),
                    launch_cpu_us=us(cpu),
                    launch_cpu_avg_us=us(int(cpu) / n),
                    launch_cpu_max_us=us(cpu_high),
                    queue_avg=round(queue_sum / max(count, 1), 2),
                    queue_max=int(f.queue_max[q]) if q is not None else 0,
                )
            )
        rows.sort(key=lambda r: (-r.launch_cpu_us, r.name))
        ((kernels, linked, calls),) = got.rows(COUNTS)
        return ViewRows(rows, _notes(int(kernels), int(linked), bool(calls)))


def _notes(kernels: int, linked: int, calls: bool) -> tuple[str, ...]:
    if not calls:
        return (f"no kernel launch to show: {NO_API}",)
    if linked < kernels:
        return (
            f"{kernels - linked:,} of {kernels:,} kernels have no launching API call in the "
            "window (correlation id unknown, or the call was not traced)",
        )
    return ()
