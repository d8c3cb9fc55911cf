"""GPU work, device memory and host time attributed to Python stacks, in SQL over the lake
(docs/concepts/code-attribution.md, "Attribution").

A GPU record (kernel, copy, memset) is attributed to the stack of the call that
launched it:

1. **exactly**, where a launch capture (``stack_samples.kind = 2``) carries its
   correlation id: the stack the launching thread was in at the call;
2. else through its launching call (``api_calls``, the same correlation id): the
   nearest sample or capture of that thread at or before the call's start, at most
   ``NEAREST_LIMIT_NS`` before it (the distance is kept, so a view can say how far);
3. else not at all: no launch call was recorded (API records off, or the call came
   before the capture), or its thread has no sample close enough.

Host time comes from the sampler's samples (``kind = 1``): each stands for the time to
its thread's next sample, or its thread's median interval where that gap is over
``NEAREST_LIMIT_NS`` (the last sample of a window, a sampler slowed down).

Every query groups in DuckDB and returns one row per (stream, leaf stack): what Python
gets is bounded by the number of distinct stacks, never by the records.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import duckdb

# A sample more than this before a launching call does not stand in for its stack: the
# sampler's slowest rate (5 Hz) leaves 200 ms between samples, and GIL waits stretch it.
NEAREST_LIMIT_NS = 1_000_000_000

EXACT, NEAREST, NO_CALL, NO_SAMPLE = 1, 2, 3, 4
HOW = {EXACT: "launch capture", NEAREST: "nearest sample", NO_CALL: "no launch call",
       NO_SAMPLE: "no sample"}  # fmt: skip

# (job, run, stream_id) names a stream; its stack ids are its own.
KEY = "job, run, stream_id"


@dataclass(frozen=True)
class Scope:
    """What to read: jobs (empty: all) and a window on the collector clock."""

    jobs: tuple[str, ...] = ()
    since_ns: int | None = None
    until_ns: int | None = None

    def where(self, start: str = "start_ns", end: str | None = "start_ns + duration_ns") -> str:
        parts = ["TRUE"]
        if self.jobs:
            parts.append("job IN (" + ", ".join(_quote(j) for j in self.jobs) + ")")
        if self.since_ns is not None:
            parts.append(f"{end or start} > {int(self.since_ns)}")
        if self.until_ns is not None:
            parts.append(f"{start} < {int(self.until_ns)}")
        return " AND ".join(parts)

    def clipped(self) -> str:
        """A record's duration inside the window (ns)."""
        end = "start_ns + duration_ns"
        if self.until_ns is not None:
            end = f"least({end}, {int(self.until_ns)})"
        start = "start_ns" if self.since_ns is None else f"greatest(start_ns, {int(self.since_ns)})"
        return f"greatest(0, {end} - {start})"


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def gpu_records(scope: Scope) -> str:
    """Kernels (1), copies (2), memsets (3) in the scope: stream, correlation, ns, bytes."""
    parts = [
        f"SELECT {KEY}, task, correlation, {what} AS what, {scope.clipped()} AS ns, "
        f"{'0' if table == 'kernels' else 'bytes'} AS bytes, start_ns "
        f"FROM {table} WHERE {scope.where()}"
        for what, table in ((1, "kernels"), (2, "copies"), (3, "memsets"))
    ]
    return " UNION ALL ".join(parts)


def attributed(records: str) -> str:
    """``records`` (rows with KEY, correlation, start_ns) each with its ``stack_id``,
    ``how`` and ``gap`` (ns from the sample to the call; 0 for a launch capture)."""
    return f"""
WITH r AS ({records}),
captures AS (
  SELECT {KEY}, correlation, min(stack_id) AS stack_id
  FROM stack_samples SEMI JOIN r USING ({KEY}, correlation)
  WHERE kind = 2 AND correlation <> 0 GROUP BY ALL),
exact AS (SELECT r.*, c.stack_id FROM r LEFT JOIN captures c USING ({KEY}, correlation)),
calls AS (
  SELECT {KEY}, correlation, arg_min(thread, start_ns) AS thread, min(start_ns) AS call_ns
  FROM api_calls SEMI JOIN (SELECT * FROM exact WHERE stack_id IS NULL) e
    USING ({KEY}, correlation)
  WHERE correlation <> 0 GROUP BY ALL),
pending AS (
  SELECT e.* EXCLUDE (stack_id), c.thread, c.call_ns
  FROM exact e LEFT JOIN calls c USING ({KEY}, correlation) WHERE e.stack_id IS NULL),
near AS (
  SELECT p.*, s.stack_id AS near_stack, p.call_ns - s.time_ns AS near_gap
  FROM pending p ASOF LEFT JOIN
    (SELECT {KEY}, thread, time_ns, stack_id FROM stack_samples
     SEMI JOIN (SELECT DISTINCT {KEY} FROM pending) k USING ({KEY})) s
  ON p.job = s.job AND p.run = s.run AND p.stream_id = s.stream_id
     AND p.thread = s.thread AND p.call_ns >= s.time_ns)
SELECT e.* EXCLUDE (stack_id), e.stack_id, {EXACT} AS how, 0 AS gap
FROM exact e WHERE e.stack_id IS NOT NULL
UNION ALL
SELECT n.* EXCLUDE (thread, call_ns, near_stack, near_gap),
  CASE WHEN n.near_gap <= {NEAREST_LIMIT_NS} THEN n.near_stack END AS stack_id,
  CASE WHEN n.call_ns IS NULL THEN {NO_CALL}
       WHEN n.near_gap <= {NEAREST_LIMIT_NS} THEN {NEAREST} ELSE {NO_SAMPLE} END AS how,
  CASE WHEN n.near_gap <= {NEAREST_LIMIT_NS} THEN n.near_gap ELSE 0 END AS gap
FROM near n
"""


def by_stack(records: str) -> str:
    """Per (stream, leaf stack, how): records, ns, kernels, launches, bytes and the
    nearest samples' distances; stack_id NULL for work no stack was found for.
    ``records``: rows with KEY, task, correlation, what (1 kernel), ns, bytes, start_ns."""
    return f"""
SELECT {KEY}, any_value(task) AS task, stack_id, how, count(*) AS records,
  sum(ns) AS ns, count(*) FILTER (WHERE what = 1) AS kernels,
  count(DISTINCT correlation) AS launches, sum(bytes) AS bytes,
  sum(gap) AS gap_sum, max(gap) AS gap_max
FROM ({attributed(records)}) GROUP BY ALL
"""


def host_by_stack(scope: Scope) -> str:
    """Per (stream, leaf stack): the sampled threads' time there (ns) and samples."""
    return f"""
WITH s AS (
  SELECT {KEY}, task, thread, stack_id, time_ns,
    lead(time_ns) OVER (PARTITION BY {KEY}, thread ORDER BY time_ns) - time_ns AS gap
  FROM stack_samples WHERE kind = 1 AND {scope.where("time_ns", None)}),
w AS (
  SELECT *, median(gap) OVER (PARTITION BY {KEY}, thread) AS typical FROM s)
SELECT {KEY}, any_value(task) AS task, stack_id,
  sum(CASE WHEN gap <= {NEAREST_LIMIT_NS} THEN gap
           ELSE least(coalesce(typical, 0), {NEAREST_LIMIT_NS}) END)::BIGINT AS ns,
  count(*) AS samples
FROM w GROUP BY ALL
"""


@dataclass
class Nodes:
    """The stack nodes the attributed leaves reach, by (job, run, stream_id, stack_id):
    (parent_id, file, line, function)."""

    rows: dict[tuple[str, str, str, int], tuple[int, str, int, str]] = field(default_factory=dict)


def ancestors(con: duckdb.DuckDBPyConnection, leaves: str) -> Nodes:
    """Every stack node on the path from each leaf of ``leaves`` (a relation with KEY and
    stack_id) to its root: bounded by the distinct stacks used, not by records."""
    sql = f"""
WITH RECURSIVE nodes AS (
  SELECT {KEY}, stack_id, any_value(parent_id) AS parent_id, any_value(file) AS file,
         any_value(line) AS line, any_value(function) AS function
  FROM stacks SEMI JOIN (SELECT DISTINCT {KEY} FROM ({leaves})) k USING ({KEY})
  GROUP BY ALL),
up AS (
  SELECT n.* FROM nodes n JOIN (SELECT DISTINCT {KEY}, stack_id FROM ({leaves})) l
    USING ({KEY}, stack_id)
  UNION
  SELECT p.* FROM up JOIN nodes p
    ON p.job = up.job AND p.run = up.run AND p.stream_id = up.stream_id
       AND p.stack_id = up.parent_id)
SELECT job, run, CAST(stream_id AS VARCHAR), stack_id, parent_id, CAST(file AS VARCHAR),
       line, CAST(function AS VARCHAR) FROM up
"""
    out = Nodes()
    for job, run, stream, stack, parent, file, line, function in con.execute(sql).fetchall():
        out.rows[(job, run, stream, int(stack))] = (
            int(parent or 0),
            file or "",
            int(line or 0),
            function or "",
        )
    return out


def live_at_peak(scope: Scope) -> str:
    """The allocations live when each job's device memory (all its processes and GPUs)
    was at its highest, as records for ``by_stack`` (what 4, the block's bytes) with the
    job's peak and when: every allocation and release of the jobs counts, whatever the
    window (the level at any time depends on all that came before)."""
    jobs = Scope(scope.jobs)
    return f"""
WITH m AS (
  SELECT {KEY}, task, device, address, coalesce(correlation, 0) AS correlation, start_ns,
         bytes, memory_op FROM memory WHERE {jobs.where("start_ns", None)} AND memory_op IN (1, 2)),
levels AS (
  SELECT job, start_ns, sum(CASE memory_op WHEN 1 THEN bytes ELSE -bytes END) OVER (
    PARTITION BY job ORDER BY start_ns, memory_op DESC, address
    ROWS UNBOUNDED PRECEDING) AS level FROM m),
peaks AS (SELECT job, max(level) AS peak, arg_max(start_ns, level) AS peak_ns
          FROM levels GROUP BY job),
allocs AS (
  SELECT m.*, p.peak, p.peak_ns FROM m JOIN peaks p USING (job)
  WHERE m.memory_op = 1 AND m.start_ns <= p.peak_ns),
freed AS (
  SELECT a.{KEY.replace(", ", ", a.")}, a.device, a.address, a.start_ns FROM allocs a
  JOIN m r ON r.job = a.job AND r.run = a.run AND r.stream_id = a.stream_id
   AND r.device = a.device AND r.address = a.address AND r.memory_op = 2
   AND r.start_ns >= a.start_ns AND r.start_ns <= a.peak_ns)
SELECT a.{KEY.replace(", ", ", a.")}, a.task, a.correlation, 4 AS what, 0 AS ns, a.bytes,
       a.start_ns, a.peak, a.peak_ns
FROM allocs a ANTI JOIN freed f USING ({KEY}, device, address, start_ns)
"""
