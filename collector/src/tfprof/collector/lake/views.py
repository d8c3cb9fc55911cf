"""The views ``sql`` predefines over the lake's tables, as SQL text.

``KERNEL_SUMMARY`` and ``COPY_SUMMARY`` are plain SQL that Spark SQL and Trino run
unchanged (the Spark test runs the first); averages are ``sum / count`` so every engine
divides the same exact integers once. The others use DuckDB's dialect.
"""

from __future__ import annotations

import pyarrow as pa

from tfprof.collector.lake.collective_sql import ARRIVALS, CALLS
from tfprof.collector.lake.dist_sql import LAKE, STEPS
from tfprof.collector.store.catalog import run_state_sql
from tfprof.core.cupti_labels import COPY_KINDS

# Durations are clamped at zero, as every analysis clamps them (a clock step can make
# CUPTI report an end before the start).
KERNEL_SUMMARY = """
SELECT job, name, count(*) AS count, sum(d) AS total_ns, sum(d) / count(*) AS avg_ns,
       min(d) AS min_ns, max(d) AS max_ns
FROM (SELECT job, name, greatest(duration_ns, 0) AS d FROM kernels) AS k GROUP BY job, name
"""

_DIRECTION = " ".join(f"WHEN {v} THEN '{label}'" for v, label in sorted(COPY_KINDS.names.items()))
COPY_SUMMARY = f"""
SELECT job, direction, count(*) AS count, sum(bytes) AS total_bytes,
       sum(duration_ns) AS total_ns,
       sum(bytes) / nullif(sum(duration_ns), 0) AS gb_per_s
FROM (SELECT job, bytes, greatest(duration_ns, 0) AS duration_ns,
             CASE copy_kind {_DIRECTION} ELSE '{COPY_KINDS.fallback}' END AS direction
      FROM copies) AS c
GROUP BY job, direction
"""

# Busy time of each physical GPU per job: the union of its kernels', copies' and memsets'
# intervals (never syncs: host waits), as every analysis defines GPU busy time (one
# island per run of overlapping work), over the span from first start to last end;
# busy_fraction is of the captured part of that span (the job's capture windows; the
# whole span for lakes written before windows were kept), and never below busy time.
_ON_GPU = " UNION ALL ".join(
    f"SELECT job, run, stream_id, host, device, start_ns, greatest(duration_ns, 0) AS d FROM {t}"
    for t in ("kernels", "copies", "memsets")
)
GPU_BUSY = f"""
WITH k AS (
  SELECT k.job, coalesce(nullif(d.uuid, ''), k.host || '/gpu:' || CAST(k.device AS VARCHAR))
           AS gpu,
         k.start_ns, k.start_ns + k.d AS end_ns
  FROM ({_ON_GPU}) k LEFT JOIN devices d
    ON d.job = k.job AND d.run = k.run AND d.stream_id = k.stream_id AND d.ordinal = k.device
), ordered AS (
  SELECT *, max(end_ns) OVER (PARTITION BY job, gpu ORDER BY start_ns, end_ns
                              ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach
  FROM k
), islands AS (
  SELECT *, sum(CASE WHEN reach IS NULL OR start_ns > reach THEN 1 ELSE 0 END)
              OVER (PARTITION BY job, gpu ORDER BY start_ns, end_ns ROWS UNBOUNDED PRECEDING)
              AS island
  FROM ordered
), spans AS (
  SELECT job, gpu, island, min(start_ns) AS s, max(end_ns) AS e FROM islands GROUP BY ALL
), per AS (
  SELECT job, gpu, count(*) AS busy_periods, CAST(sum(e - s) AS BIGINT) AS busy_ns,
         min(s) AS first_ns, max(e) AS last_ns
  FROM spans GROUP BY job, gpu
), cw AS (
  -- Each job's capture windows, as their union (ranks share theirs).
  SELECT job, min(start_ns) AS s, max(end_ns) AS e FROM (
    SELECT *, sum(CASE WHEN reach IS NULL OR start_ns > reach THEN 1 ELSE 0 END)
                OVER (PARTITION BY job ORDER BY start_ns, end_ns ROWS UNBOUNDED PRECEDING)
                AS island
    FROM (SELECT job, start_ns, end_ns,
                 max(end_ns) OVER (PARTITION BY job ORDER BY start_ns, end_ns
                                   ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach
          FROM capture_windows WHERE end_ns > start_ns))
  GROUP BY job, island
), c AS (
  SELECT per.*, (SELECT sum(greatest(0, least(cw.e, per.last_ns) - greatest(cw.s, per.first_ns)))
                 FROM cw WHERE cw.job = per.job) AS in_windows
  FROM per
)
SELECT job, gpu, busy_periods, busy_ns, first_ns, last_ns,
       busy_ns / nullif(greatest(coalesce(in_windows, last_ns - first_ns), busy_ns), 0)
         AS busy_fraction
FROM c
"""

# Not a lake table: the streams a live collector holds open in the data dirs a query
# names (``query.Engine.live_streams``), what the runs view calls ``streaming``.
LIVE_STREAMS = pa.schema([("job", pa.string()), ("run", pa.string()), ("stream_id", pa.string())])

_GPU_TABLES = ("kernels", "copies", "memsets", "syncs")
_ALL_RECORDS = " UNION ALL ".join(
    f"SELECT job, run, start_ns, duration_ns, {int(t in _GPU_TABLES)} AS gpu FROM {t}"
    for t in ("kernels", "copies", "memsets", "syncs", "api_calls", "markers", "memory", "steps")
)
RUNS = f"""
WITH s AS (
  SELECT job, run, count(*) AS streams, string_agg(DISTINCT host, ',' ORDER BY host) AS hosts,
         string_agg(DISTINCT task, ',' ORDER BY task) AS tasks,
         string_agg(DISTINCT collector, ',' ORDER BY collector) AS collectors
  FROM streams GROUP BY job, run
), g AS (
  SELECT job, run, count(*) AS finished_streams,
         sum(dropped_tracer + dropped_relay) AS dropped
  FROM goodbyes GROUP BY job, run
), q AS (
  -- Queue drops: a stream's goodbye has the final count, its log_state row the count
  -- so far of a stream that has not said goodbye (the larger, as reading the log).
  SELECT job, run, sum(dropped_queue) AS dropped FROM (
    SELECT job, run, stream_id, max(dropped_queue) AS dropped_queue FROM (
      SELECT job, run, stream_id, dropped_queue FROM goodbyes
      UNION ALL SELECT job, run, stream_id, dropped_queue FROM log_state
    ) GROUP BY job, run, stream_id
  ) GROUP BY job, run
), r AS (
  SELECT job, run, count(*) AS records, sum(gpu) AS gpu_records, min(start_ns) AS first_ns,
         max(start_ns + duration_ns) AS last_ns
  FROM ({_ALL_RECORDS}) GROUP BY job, run
), l AS (
  -- Streams a live collector holds open (the data dirs named: a bare lake has none).
  SELECT job, run, count(DISTINCT stream_id) AS live FROM live_streams GROUP BY job, run
), w AS (
  -- Captured time: the union of the run's capture windows (a stream traced throughout
  -- has one, its span), as store/traced_windows.py's union_ns measures it.
  SELECT job, run, sum(e - s) AS captured_ns FROM (
    SELECT job, run, island, min(start_ns) AS s, max(end_ns) AS e FROM (
      SELECT *, sum(CASE WHEN reach IS NULL OR start_ns > reach THEN 1 ELSE 0 END)
                  OVER (PARTITION BY job, run ORDER BY start_ns, end_ns
                        ROWS UNBOUNDED PRECEDING) AS island
      FROM (SELECT job, run, start_ns, end_ns,
                   max(end_ns) OVER (PARTITION BY job, run ORDER BY start_ns, end_ns
                                     ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach
            FROM capture_windows WHERE end_ns > start_ns))
    GROUP BY ALL)
  GROUP BY job, run
)
SELECT k.job, k.run, coalesce(s.streams, 0) AS streams,
       coalesce(g.finished_streams, 0) AS finished_streams,
       {
    run_state_sql(
        "coalesce(s.streams, 0)", "coalesce(g.finished_streams, 0)", "coalesce(l.live, 0)"
    )
} AS state,
       coalesce(s.tasks, '') AS tasks, coalesce(r.records, 0) AS records,
       coalesce(g.dropped, 0) + coalesce(q.dropped, 0) AS dropped,
       r.first_ns, r.last_ns, coalesce(s.hosts, '') AS hosts,
       coalesce(s.collectors, '') AS collectors,
       coalesce(r.gpu_records, 0) AS gpu_records, coalesce(w.captured_ns, 0) AS captured_ns
-- Every run with a hello or a record: one whose streams file cannot be read is still
-- listed (incomplete, no stream known).
FROM (SELECT job, run FROM s UNION SELECT job, run FROM r) AS k
     LEFT JOIN s USING (job, run) LEFT JOIN g USING (job, run) LEFT JOIN q USING (job, run)
     LEFT JOIN r USING (job, run) LEFT JOIN l USING (job, run) LEFT JOIN w USING (job, run)
ORDER BY k.job, r.first_ns
"""
JOBS = """
SELECT job, count(*) AS runs, sum(streams) AS streams, sum(records) AS records,
       sum(dropped) AS dropped, min(first_ns) AS first_ns, max(last_ns) AS last_ns,
       sum(gpu_records) AS gpu_records, sum(captured_ns) AS captured_ns
FROM runs GROUP BY job ORDER BY job
"""
TASKS = """
SELECT job, run, task, count(*) AS streams, string_agg(DISTINCT host, ',') AS hosts
FROM streams GROUP BY job, run, task ORDER BY job, run, task
"""

# Created in this order (later ones read earlier ones). The last three (distributed
# jobs: dist_sql, collective_sql) are portable too; ``rk`` is a rank: job|run|task.
VIEWS: dict[str, str] = {
    "kernel_summary": KERNEL_SUMMARY,
    "copy_summary": COPY_SUMMARY,
    "gpu_busy": GPU_BUSY,
    "runs": RUNS,
    "jobs": JOBS,
    "tasks": TASKS,
    "step_breakdown": LAKE.bind(STEPS),
    "collective_calls": LAKE.bind(CALLS),
    "collective_arrivals": LAKE.bind(ARRIVALS),
}
