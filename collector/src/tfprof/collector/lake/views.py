"""The views ``sql`` predefines over the lake's tables, as SQL text.

``KERNEL_SUMMARY`` and ``COPY_SUMMARY`` are plain SQL that Spark SQL and Trino run
unchanged (the Spark test runs the first); averages are ``sum / count`` so every engine
divides the same exact integers once. The others use DuckDB's dialect.
"""

from __future__ import annotations

from tfprof.core.cupti_labels import COPY_KINDS

KERNEL_SUMMARY = """
SELECT job, name, count(*) AS count, sum(duration_ns) AS total_ns,
       sum(duration_ns) / count(*) AS avg_ns, min(duration_ns) AS min_ns,
       max(duration_ns) AS max_ns
FROM kernels GROUP BY job, name
"""

_DIRECTION = " ".join(f"WHEN {v} THEN '{label}'" for v, label in sorted(COPY_KINDS.names.items()))
COPY_SUMMARY = f"""
SELECT job, direction, count(*) AS count, sum(bytes) AS total_bytes,
       sum(duration_ns) AS total_ns,
       sum(bytes) / nullif(sum(duration_ns), 0) AS gb_per_s
FROM (SELECT job, bytes, duration_ns,
             CASE copy_kind {_DIRECTION} ELSE '{COPY_KINDS.fallback}' END AS direction
      FROM copies) AS c
GROUP BY job, direction
"""

# Busy time of each physical GPU per job: the union of its kernels' intervals (one
# island per run of overlapping kernels), over the span from first start to last end.
GPU_BUSY = """
WITH k AS (
  SELECT k.job, coalesce(nullif(d.uuid, ''), k.host || '/gpu:' || CAST(k.device AS VARCHAR))
           AS gpu,
         k.start_ns, k.start_ns + k.duration_ns AS end_ns
  FROM kernels k LEFT JOIN devices d
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
)
SELECT job, gpu, count(*) AS busy_periods, sum(e - s) AS busy_ns,
       min(s) AS first_ns, max(e) AS last_ns,
       sum(e - s) / nullif(max(e) - min(s), 0) AS busy_fraction
FROM spans GROUP BY job, gpu
"""

_ALL_RECORDS = " UNION ALL ".join(
    f"SELECT job, run, start_ns, duration_ns FROM {t}"
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
  SELECT job, run, count(*) AS records, min(start_ns) AS first_ns,
         max(start_ns + duration_ns) AS last_ns
  FROM ({_ALL_RECORDS}) GROUP BY job, run
)
SELECT s.job, s.run, s.streams, coalesce(g.finished_streams, 0) AS finished_streams,
       CASE WHEN coalesce(g.finished_streams, 0) = s.streams THEN 'finished'
            ELSE 'incomplete' END AS state,
       s.tasks, coalesce(r.records, 0) AS records,
       coalesce(g.dropped, 0) + coalesce(q.dropped, 0) AS dropped,
       r.first_ns, r.last_ns, s.hosts, s.collectors
FROM s LEFT JOIN g USING (job, run) LEFT JOIN q USING (job, run) LEFT JOIN r USING (job, run)
ORDER BY s.job, r.first_ns
"""
JOBS = """
SELECT job, count(*) AS runs, sum(streams) AS streams, sum(records) AS records,
       sum(dropped) AS dropped, min(first_ns) AS first_ns, max(last_ns) AS last_ns
FROM runs GROUP BY job ORDER BY job
"""
TASKS = """
SELECT job, run, task, count(*) AS streams, string_agg(DISTINCT host, ',') AS hosts
FROM streams GROUP BY job, run, task ORDER BY job, run, task
"""

# Created in this order (later ones read earlier ones).
VIEWS: dict[str, str] = {
    "kernel_summary": KERNEL_SUMMARY,
    "copy_summary": COPY_SUMMARY,
    "gpu_busy": GPU_BUSY,
    "runs": RUNS,
    "jobs": JOBS,
    "tasks": TASKS,
}
