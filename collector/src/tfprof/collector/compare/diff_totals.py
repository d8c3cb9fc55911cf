"""Per name, what one side of a diff ran in the steps it reads: count and total time.

Kinds of rows (``kind``):

- ``kernel``: GPU kernels by name; ``copy``: memcpy and memset activities by name (a
  record without one: ``Memcpy <kind>`` / ``Memset``); ``sync``: CUDA synchronization
  activities;
- ``api``: CUDA runtime and driver calls; ``op``: host ranges (framework ops, NVTX ranges,
  annotations, GPU-side annotations);
- ``collective``: the communication kernels (NCCL / RCCL: a name matching
  ``^(nccl|rccl)\\w*Kernel``, as HolisticTraceAnalysis classifies them), by collective:
  the one Kineto's args name, else the kernel name's (``ncclDevKernel_AllReduce_...``:
  ``allreduce``), lower case without ``_``. These are also in ``kernel``.

Which step a row belongs to (HolisticTraceAnalysis' ``TraceDiff`` rule, so per-name
counts equal its ``compare_traces``): a host row by its start; GPU work by the start of
the CUDA call that launched it (same process and correlation id), so a kernel is its
launching step's even when it runs later. GPU work whose launch was not recorded
(launched before the capture) is in no step; in a process that recorded no CUDA calls at
all, GPU work goes by its own start. Reading the whole run as one step, every row counts.

One SQL statement per side (DuckDB over the lake's tables): the side's rows are streamed
and grouped, never held.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import duckdb

from tfprof.collector.compare.diff_side import Side, literal
from tfprof.collector.compare.diff_steps import STEPS_TABLE
from tfprof.core.cupti_labels import COPY_KINDS, SYNC_TYPES

KINDS = ("kernel", "copy", "sync", "api", "op", "collective")
COMM_KERNEL = r"^(nccl|rccl)\w*Kernel"  # case-insensitive


def _case(column: str, labels: Mapping[int, str], prefix: str) -> str:
    whens = " ".join(f"WHEN {v} THEN {literal(prefix + n)}" for v, n in sorted(labels.items()))
    return f"CASE {column} {whens} ELSE {literal(prefix + 'Unknown')} END"


_COPY_NAME = _case("copy_kind", COPY_KINDS.names, "Memcpy ")
_SYNC_NAME = _case("sync_type", SYNC_TYPES.names, "")

# GPU work with the time that places it in a step (``t0``): its launching call's start;
# in a process without recorded calls its own start; {unlinked}: what unlinked work gets.
_PLACED = """
calls AS (
  SELECT stream_id AS p, correlation AS c, min(start_ns) AS t
  FROM api_calls WHERE {where} AND correlation > 0 GROUP BY ALL
), hosted AS (
  SELECT DISTINCT p FROM calls
), gpu AS (
  SELECT 'kernel' AS kind, stream_id AS p, device, name::VARCHAR AS name, start_ns,
         duration_ns, correlation, collective::VARCHAR AS collective
  FROM kernels WHERE {where}
  UNION ALL
  SELECT 'copy', stream_id, device, coalesce(name::VARCHAR, {copy_name}), start_ns,
         duration_ns, correlation, NULL
  FROM copies WHERE {where}
  UNION ALL
  SELECT 'copy', stream_id, device, coalesce(name::VARCHAR, 'Memset'), start_ns,
         duration_ns, correlation, NULL
  FROM memsets WHERE {where}
  UNION ALL
  SELECT 'sync', stream_id, device, coalesce(name::VARCHAR, {sync_name}), start_ns,
         duration_ns, correlation, NULL
  FROM syncs WHERE {where}
), placed AS (
  SELECT g.*,
         CASE WHEN c.t IS NOT NULL THEN c.t
              WHEN h.p IS NULL THEN g.start_ns
              ELSE {unlinked} END AS t0
  FROM gpu g
  LEFT JOIN calls c ON g.p = c.p AND g.correlation = c.c AND g.correlation > 0
  LEFT JOIN hosted h ON g.p = h.p
)"""

_TOTALS = """
WITH {placed}, named AS (
  SELECT kind, p, name, t0, duration_ns, collective FROM placed
  UNION ALL
  SELECT 'api', stream_id, name::VARCHAR, start_ns, duration_ns, NULL
  FROM api_calls WHERE {where}
  UNION ALL
  SELECT 'op', stream_id, name::VARCHAR, start_ns, duration_ns, NULL
  FROM markers WHERE {where}
), inside AS (
  SELECT r.kind, coalesce(r.name, '(unnamed)') AS name, r.duration_ns AS d, r.collective
  FROM named r ASOF JOIN {steps} st ON r.p = st.p AND r.t0 >= st.s
  WHERE r.t0 < st.e
)
SELECT kind, name, count(*) AS n, sum(d) AS ns FROM inside GROUP BY kind, name
UNION ALL
SELECT 'collective',
       lower(replace(coalesce(nullif(collective, ''),
                              nullif(regexp_extract(name, 'Kernel_([A-Za-z]+)', 1), ''),
                              'unknown'), '_', '')),
       count(*), sum(d)
FROM inside WHERE kind = 'kernel' AND regexp_matches(name, '{comm}', 'i')
GROUP BY 2
"""


def placed_sql(side: Side, whole: bool) -> str:
    """The ``calls``, ``hosted``, ``gpu`` and ``placed`` CTEs for ``side`` (no WITH)."""
    return _PLACED.format(
        where=side.where,
        copy_name=_COPY_NAME,
        sync_name=_SYNC_NAME,
        # The whole run counts every row; a step only the work its calls launched.
        unlinked="g.start_ns" if whole else "NULL",
    )


@dataclass(frozen=True)
class NameTotal:
    kind: str
    name: str
    count: int
    total_ns: int


def name_totals(con: duckdb.DuckDBPyConnection, side: Side, whole: bool) -> list[NameTotal]:
    """Per (kind, name): rows and summed duration in the steps of ``diff_steps``."""
    sql = _TOTALS.format(
        placed=placed_sql(side, whole), where=side.where, steps=STEPS_TABLE, comm=COMM_KERNEL
    )
    return [
        NameTotal(str(kind), str(name), int(n), int(ns or 0))
        for kind, name, n, ns in con.execute(sql).fetchall()
    ]
