"""Per name, what one side of a diff ran in the steps it reads: count and total time.

Kinds of rows (``kind``):

- ``kernel``: GPU kernels by name; ``copy``: memcpy and memset activities by name (a
  record without one: ``Memcpy <kind>`` / ``Memset``); ``sync``: CUDA synchronization
  activities;
- ``api``: CUDA runtime and driver calls; ``op``: host ranges (framework ops, NVTX ranges,
  annotations, GPU-side annotations);
- ``collective``: the communication kernels (NCCL / RCCL by name, as HolisticTraceAnalysis
  classifies them), by collective type as the collectives view names it: Kineto's
  collective name, else the kernel name's (``ncclDevKernel_AllReduce_...``:
  ``allreduce``). These are also in ``kernel``.

Which step a row belongs to (HolisticTraceAnalysis' ``TraceDiff`` rule, so per-name
counts equal its ``compare_traces``): a host row by its start; GPU work by the start of
the CUDA call that launched it (same process and correlation id), so a kernel is its
launching step's even when it runs later. GPU work whose launch was not recorded
(launched before the capture) is in no step; in a process that recorded no CUDA calls at
all, GPU work goes by its own start. Reading the whole run as one step, every row counts.

One SQL statement per side over the read engine's relations (``{g}``, ``{h}``: the
side's records clipped to its window): DuckDB streams and groups them, never holds them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tfprof.collector.lake.dist_sql import COMM_NAME, type_of_args, type_of_name
from tfprof.collector.read.needs import Query
from tfprof.core.cupti_labels import COPY_KINDS, SYNC_TYPES

KINDS = ("kernel", "copy", "sync", "api", "op", "collective")
# NCCL / RCCL kernels and their collective type, as the collectives view has them
# (``lake.dist_sql``: Kineto's collective name, else the kernel name's).
COMM_KERNEL = COMM_NAME.replace("@N@", "name")
COLLECTIVE_TYPE = (
    f"CASE WHEN coalesce(collective, '') <> '' THEN {type_of_args('collective')} "
    f"ELSE {type_of_name('name')} END"
)


def literal(text: str) -> str:
    """``text`` as a SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def _case(column: str, labels: Mapping[int, str], prefix: str) -> str:
    whens = " ".join(f"WHEN {v} THEN {literal(prefix + n)}" for v, n in sorted(labels.items()))
    return f"CASE {column} {whens} ELSE {literal(prefix + 'Unknown')} END"


_COPY_NAME = _case("copy_kind", COPY_KINDS.names, "Memcpy ")
_SYNC_NAME = _case("sync_type", SYNC_TYPES.names, "")

# GPU work with the time that places it in a step (``t0``): its launching call's start;
# in a process without recorded calls its own start; {unlinked}: what unlinked work gets.
# Relations: the read engine's ({g}: kind 1 kernel, 2 copy, 3 memset, 4 sync; {h}: 5 API
# call, 6 host range).
_PLACED = """
calls AS (
  SELECT process AS p, correlation AS c, min(s) AS t
  FROM {{h}} WHERE kind = 5 AND correlation > 0 GROUP BY process, correlation
), hosted AS (
  SELECT DISTINCT p FROM calls
), gpu AS (
  SELECT CASE kind WHEN 1 THEN 'kernel' WHEN 4 THEN 'sync' ELSE 'copy' END AS kind,
         process AS p, device,
         coalesce(name, CASE kind WHEN 2 THEN {copy_name} WHEN 3 THEN 'Memset'
                                  ELSE {sync_name} END) AS name,
         s, d, correlation, CASE WHEN kind = 1 THEN collective END AS collective
  FROM {{g}}
), placed AS (
  SELECT g.*,
         CASE WHEN c.t IS NOT NULL THEN c.t
              WHEN h.p IS NULL THEN g.s
              ELSE {unlinked} END AS t0
  FROM gpu g
  LEFT JOIN calls c ON g.p = c.p AND g.correlation = c.c AND g.correlation > 0
  LEFT JOIN hosted h ON g.p = h.p
)"""

_TOTALS = """
WITH {placed}, stp AS ({steps}), named AS (
  SELECT kind, p, name, t0, d, collective FROM placed
  UNION ALL
  SELECT CASE kind WHEN 5 THEN 'api' ELSE 'op' END, process, name, s, d, NULL
  FROM {{h}} WHERE kind IN (5, 6)
), inside AS (
  SELECT r.kind, coalesce(r.name, '(unnamed)') AS name, r.d, r.collective
  FROM named r ASOF JOIN stp ON r.p = stp.p AND r.t0 >= stp.s
  WHERE r.t0 < stp.e
)
SELECT kind, name, count(*) AS n, sum(d) AS ns FROM inside GROUP BY kind, name
UNION ALL
SELECT 'collective', {coll_type}, count(*), sum(d)
FROM inside WHERE kind = 'kernel' AND {comm}
GROUP BY 2
"""


def placed_sql(whole: bool) -> str:
    """The ``calls``, ``hosted``, ``gpu`` and ``placed`` CTEs (no WITH)."""
    return _PLACED.format(
        copy_name=_COPY_NAME,
        sync_name=_SYNC_NAME,
        # The whole run counts every row; a step only the work its calls launched.
        unlinked="g.s" if whole else "NULL",
    )


@dataclass(frozen=True)
class NameTotal:
    kind: str
    name: str
    count: int
    total_ns: int


def totals_query(steps_sql: str, whole: bool) -> Query:
    """Per (kind, name): rows and summed duration in the steps ``steps_sql`` lists."""
    return Query(
        _TOTALS.format(
            placed=placed_sql(whole), steps=steps_sql, comm=COMM_KERNEL, coll_type=COLLECTIVE_TYPE
        )
    )


def name_totals(rows: list[tuple[Any, ...]]) -> list[NameTotal]:
    return [NameTotal(str(k), str(name), int(n), int(ns or 0)) for k, name, n, ns in rows]
