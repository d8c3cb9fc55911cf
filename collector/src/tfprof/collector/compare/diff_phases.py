"""Where one side's step time went: the ``phase`` rows of a diff.

Per process and step read, over the GPU work the step launched (its own work, placed as
``diff_totals`` places it; synchronization records are waits, not work), per GPU:

- ``compute``: the union of its non-communication kernels' intervals;
- ``communication``: the union of its NCCL / RCCL kernels;
  ``communication exposed``: the part of it with no compute kernel running
  (|comm ∪ compute| - |compute|), ``communication overlapped`` the rest;
- ``copies``: the union of its memcpy and memset activities;
- ``GPU busy``: the union of all of it; ``GPU idle``: the step's time minus that, per
  GPU the step used (at least 0);

and ``step`` itself: the step's time (its range: the STEP record, the ProfilerStep
range, or the process's first-to-last record for the whole run). A phase row's count is
the (process, step) pairs, or (process, step, GPU) triples, it sums over.

Unions run in DuckDB with window functions (an interval starts a new island when it
starts after every earlier one ended; touching intervals merge, as in HTA).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from tfprof.collector.compare.diff_totals import NameTotal, placed_sql
from tfprof.collector.lake.dist_sql import COMM_NAME
from tfprof.collector.read.needs import Query

STEP = "step"
COMPUTE = "compute"
COMM = "communication"
COMM_EXPOSED = "communication exposed"
COMM_OVERLAPPED = "communication overlapped"
COPIES = "copies"
BUSY = "GPU busy"
IDLE = "GPU idle"
PHASES = (STEP, COMPUTE, COMM, COMM_EXPOSED, COMM_OVERLAPPED, COPIES, BUSY, IDLE)

_UNIONS = """
WITH {placed}, stp AS ({steps}), own AS (
  SELECT stp.p, stp.n, pl.device, pl.s, pl.s + pl.d AS e,
         CASE WHEN pl.kind = 'copy' THEN 'copies'
              WHEN {comm} THEN 'comm'
              ELSE 'compute' END AS class
  FROM placed pl ASOF JOIN stp ON pl.p = stp.p AND pl.t0 >= stp.s
  WHERE pl.t0 < stp.e AND pl.kind <> 'sync'
), sets AS (
  SELECT p, n, device, s, e,
         unnest(CASE class WHEN 'compute' THEN ['compute', 'comm+compute', 'busy']
                           WHEN 'comm' THEN ['comm', 'comm+compute', 'busy']
                           ELSE ['copies', 'busy'] END) AS part
  FROM own
), ordered AS (
  SELECT *, max(e) OVER (PARTITION BY p, n, device, part ORDER BY s, e
                         ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach
  FROM sets
), islands AS (
  SELECT *, sum(CASE WHEN reach IS NULL OR s > reach THEN 1 ELSE 0 END)
              OVER (PARTITION BY p, n, device, part ORDER BY s, e ROWS UNBOUNDED PRECEDING)
              AS island
  FROM ordered
), spans AS (
  SELECT p, n, device, part, max(e) - min(s) AS len FROM islands
  GROUP BY p, n, device, part, island
)
SELECT p, n, device, part, sum(len) FROM spans GROUP BY p, n, device, part
"""


def phase_queries(steps_sql: str, whole: bool) -> tuple[Query, Query]:
    """The steps read, ``(p, n, s, e)``, and the unions of their own work per (process,
    step, GPU, part)."""
    comm = COMM_NAME.replace("@N@", "pl.name")
    unions = _UNIONS.format(placed=placed_sql(whole), steps=steps_sql, comm=comm)
    return Query(f"SELECT p, n, s, e FROM ({steps_sql})"), Query(unions)


def phase_totals(
    steps_rows: list[tuple[Any, ...]], union_rows: list[tuple[Any, ...]], whole: bool
) -> list[NameTotal]:
    """The ``phase`` rows of a side, from ``phase_queries``' rows."""
    past = 1 if whole else 0  # the whole run's range ends one past its last end
    steps = {(int(p), int(n)): int(e) - int(s) - past for p, n, s, e in steps_rows}
    # (process, step, GPU) -> part -> union length (ns)
    unions: dict[tuple[int, int, int], dict[str, int]] = defaultdict(dict)
    for p, n, device, part, length in union_rows:
        unions[(int(p), int(n), int(device))][str(part)] = int(length)
    count: dict[str, int] = defaultdict(int)
    total: dict[str, int] = defaultdict(int)
    for length in steps.values():
        count[STEP] += 1
        total[STEP] += length
    for (p, n, _), parts in unions.items():
        compute, comm = parts.get("compute", 0), parts.get("comm", 0)
        exposed = parts.get("comm+compute", 0) - compute
        busy = parts.get("busy", 0)
        figures = {
            COMPUTE: compute,
            COMM: comm,
            COMM_EXPOSED: exposed,
            COMM_OVERLAPPED: comm - exposed,
            COPIES: parts.get("copies", 0),
            BUSY: busy,
            IDLE: max(0, steps.get((p, n), 0) - busy),
        }
        for name, ns in figures.items():
            count[name] += 1
            total[name] += ns
    return [NameTotal("phase", name, count[name], total[name]) for name in PHASES if count[name]]
