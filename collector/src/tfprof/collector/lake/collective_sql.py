"""Collective calls and their arrivals across ranks, as portable SQL (``dist_sql``'s
inputs and adapters; DuckDB for the CLI and ``sql``, Spark SQL over the same files).

A collective call is one communication kernel (NCCL ``ncclKernel_*``/``ncclDevKernel_*``,
RCCL). Its type comes, in this order, from Kineto's collective args on the kernel, from
the ``nccl:<op>`` range (PyTorch's annotation) or NCCL's own NVTX range (``ncclAllReduce``)
the launching call ran inside (a kernel name only says the first operation of a launch,
e.g. ``SendRecv`` for an all-to-all),
and from the kernel's name. Its process group is Kineto's process group name, else the
kernel's CUDA stream (ProcessGroupNCCL runs each group on its own stream). The k-th call
of a process group on each rank (in launch order) is one collective across the ranks;
its *arrival* on a rank is the kernel's start on the collector's clock.
"""

from __future__ import annotations

from tfprof.collector.lake.dist_sql import (
    LAUNCHED,
    PERIODIC,
    RANGE_OP,
    RANGES,
    type_of_args,
    type_of_name,
)

# Bytes per element of Kineto's dtype names.
DTYPE_BYTES = {"Float": 4, "Half": 2, "BFloat16": 2, "Double": 8, "Long": 8, "Int": 4,
               "Short": 2, "Byte": 1, "Char": 1, "Bool": 1, "Float8_e4m3fn": 1,
               "Float8_e5m2": 1, "ComplexFloat": 8, "ComplexDouble": 16}  # fmt: skip
_ELEM = "CASE coll_dtype " + " ".join(f"WHEN '{k}' THEN {v}" for k, v in DTYPE_BYTES.items())
_ELEM += " END"

_CALLS = f"""
rlist AS (
  SELECT rk, thread, name AS rname, s AS rs, e AS re,
         row_number() OVER (PARTITION BY rk, thread ORDER BY s, e) AS rord
  FROM ranges
),
rtl AS (
  SELECT rk, thread, rs AS t, 0 AS isk, rord, CAST(0 AS BIGINT) AS corr FROM rlist
  UNION ALL
  SELECT rk, thread, ls, 1, CAST(NULL AS BIGINT), corr FROM g WHERE cls = 2 AND ls IS NOT NULL
),
rtag AS (
  SELECT rk, thread, t, isk, corr,
         max(rord) OVER (PARTITION BY rk, thread ORDER BY t, isk ROWS UNBOUNDED PRECEDING)
           AS rord
  FROM rtl
),
encl AS (
  SELECT x.rk, x.corr, r.rname FROM rtag x
  JOIN rlist r ON r.rk = x.rk AND r.thread = x.thread AND r.rord = x.rord
  WHERE x.isk = 1 AND x.t < r.re
),
comm0 AS (
  SELECT g.rk, g.jb, g.device, g.stream, g.s, g.e, g.name, g.ls, o.num AS step,
         CASE WHEN g.coll IS NOT NULL THEN {type_of_args("g.coll")}
              WHEN n.rname IS NOT NULL THEN {type_of_args(RANGE_OP.replace("@N@", "n.rname"))}
              ELSE {type_of_name("g.name")} END AS ctype,
         CASE WHEN g.coll IS NOT NULL THEN 'args' WHEN n.rname IS NOT NULL THEN 'annotation'
              ELSE 'name' END AS source,
         coalesce(g.pg_name, concat('stream:', CAST(g.stream AS STRING))) AS pg,
         g.coll_n AS group_size, g.coll_dtype AS dtype,
         CASE WHEN g.coll IS NULL THEN NULL
              WHEN lower(g.coll) IN ('allgather', 'all_gather', '_allgather_base',
                                     '_all_gather_base', 'gather')
              THEN g.coll_out * ({_ELEM.replace("coll_dtype", "g.coll_dtype")})
              ELSE g.coll_in * ({_ELEM.replace("coll_dtype", "g.coll_dtype")}) END AS bytes
  FROM g LEFT JOIN encl n ON n.rk = g.rk AND n.corr = g.corr AND g.ls IS NOT NULL
  LEFT JOIN own o ON o.rk = g.rk AND o.corr = g.corr AND o.s = g.s AND g.ls IS NOT NULL
  WHERE g.cls = 2
),
comm AS (
  SELECT c.*,
         row_number() OVER (PARTITION BY rk, pg
                            ORDER BY CASE WHEN ls IS NULL THEN 0 ELSE 1 END,
                                     coalesce(ls, s), s) - 1 AS k,
         row_number() OVER (PARTITION BY rk ORDER BY s, e, stream, name) AS cid
  FROM comm0 c
),
cdevs AS (SELECT DISTINCT rk, device FROM comm),
-- One row per start, so both window passes see one total order (as dist_sql's islands).
cpts AS (
  SELECT g.rk, g.device, g.s, max(g.e) AS e
  FROM g JOIN cdevs d ON d.rk = g.rk AND d.device = g.device WHERE g.cls = 1
  GROUP BY g.rk, g.device, g.s
),
cpt AS (
  SELECT rk, device, s, e,
         max(e) OVER (PARTITION BY rk, device ORDER BY s
                      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS r
  FROM cpts
),
cisl0 AS (
  SELECT rk, device, s, e,
         sum(CASE WHEN r IS NULL OR s > r THEN 1 ELSE 0 END)
           OVER (PARTITION BY rk, device ORDER BY s ROWS UNBOUNDED PRECEDING) AS island
  FROM cpt
),
cisl AS (SELECT rk, device, min(s) AS s, max(e) AS e FROM cisl0 GROUP BY rk, device, island),
-- Compute time covered up to instant t: the lengths of the islands begun before t,
-- less what the last of them runs past t. A call is (rk, cid): numbered per rank, so
-- Spark sorts each rank's calls apart instead of every call in one task.
cov AS (
  SELECT rk, device, s AS t, 0 AS pt, e - s AS len, e AS ie, CAST(NULL AS BIGINT) AS cid,
         0 AS sign
  FROM cisl
  UNION ALL SELECT rk, device, s, 1, 0, CAST(NULL AS BIGINT), cid, -1 FROM comm
  UNION ALL SELECT rk, device, e, 1, 0, CAST(NULL AS BIGINT), cid, 1 FROM comm
),
cov2 AS (
  SELECT rk, cid, sign, t,
         sum(len) OVER x AS covered_len, max(ie) OVER x AS last_e, pt
  FROM cov
  WINDOW x AS (PARTITION BY rk, device ORDER BY t, pt ROWS UNBOUNDED PRECEDING)
),
covered AS (
  SELECT rk, cid, sum(sign * (coalesce(covered_len, 0)
                              - CASE WHEN last_e > t THEN last_e - t ELSE 0 END)) AS covered_ns
  FROM cov2 WHERE pt = 1 GROUP BY rk, cid
),
calls_out AS (
  SELECT c.rk, c.jb, c.device, c.stream, c.pg, c.k, c.step, c.ctype, c.source, c.name,
         c.s, c.e, c.e - c.s AS ns, c.e - c.s - coalesce(v.covered_ns, 0) AS exposed_ns,
         c.bytes, c.group_size, c.dtype
  FROM comm c LEFT JOIN covered v ON v.rk = c.rk AND v.cid = c.cid
)"""

_BODY = ",".join((LAUNCHED, PERIODIC, RANGES, _CALLS))

# One row per collective call.
CALLS = _BODY + "\nSELECT * FROM calls_out"

# Per job, process group, type, kernel name and source (the view merges names).
GROUP_COLUMNS = ("jb", "pg", "ctype", "name", "source", "calls", "ns", "exposed_ns",
                 "sized", "bytes", "sized_ns", "group_size", "ranks")  # fmt: skip
GROUPS = (
    _BODY
    + """
SELECT jb, pg, ctype, name, source, count(*) AS calls, sum(ns) AS ns,
       sum(exposed_ns) AS exposed_ns, count(bytes) AS sized, sum(bytes) AS bytes,
       sum(CASE WHEN bytes IS NOT NULL THEN ns ELSE 0 END) AS sized_ns,
       max(group_size) AS group_size, count(DISTINCT rk) AS ranks
FROM calls_out GROUP BY jb, pg, ctype, name, source
"""
)

# Arrivals: each collective (job, process group, k) seen on two ranks or more; per rank,
# how late it came (skew: its arrival less the earliest), and whether it came last by
# more than ``TIE_NS`` (then the others' waiting, the sum over the ranks of the latest
# arrival less theirs, is its doing).
TIE_NS = 1000
_ARRIVALS = f"""
arr AS (
  SELECT rk, jb, pg, k, step, s,
         min(s) OVER p AS first_s, max(s) OVER p AS last_s, count(*) OVER p AS n,
         row_number() OVER (PARTITION BY jb, pg, k ORDER BY s DESC, rk) AS late
  FROM calls_out
  WINDOW p AS (PARTITION BY jb, pg, k)
),
arr2 AS (SELECT a.*, sum(last_s - s) OVER (PARTITION BY jb, pg, k) AS waited FROM arr a),
runner_up AS (SELECT jb, pg, k, s AS s2 FROM arr WHERE late = 2),
matched AS (
  SELECT a.rk, a.jb, a.pg, a.k, a.step, a.n, a.s - a.first_s AS skew,
         a.last_s - a.first_s AS max_skew,
         CASE WHEN a.late = 1 AND a.last_s - b.s2 > {TIE_NS} THEN 1 ELSE 0 END AS was_last,
         a.waited
  FROM arr2 a JOIN runner_up b ON b.jb = a.jb AND b.pg = a.pg AND b.k = a.k
)"""
ARRIVALS = _BODY + "," + _ARRIVALS + "\nSELECT * FROM matched"

# Per rank: collectives matched, mean and largest skew, times last, the others' wait it
# caused, the steps it was last in.
RANK_ARRIVAL_COLUMNS = ("rk", "jb", "matched", "skew_sum", "skew_max", "last", "caused_ns")
RANK_ARRIVALS = (
    _BODY
    + ","
    + _ARRIVALS
    + """
SELECT rk, jb, count(*) AS matched, sum(skew) AS skew_sum, max(skew) AS skew_max,
       sum(was_last) AS last, sum(CASE WHEN was_last = 1 THEN waited ELSE 0 END) AS caused_ns
FROM matched GROUP BY rk, jb
"""
)
# Per job and step: the wait each rank caused there (the straggler rule names a step's).
STEP_ARRIVAL_COLUMNS = ("jb", "step", "rk", "last", "caused_ns", "collectives")
STEP_ARRIVALS = (
    _BODY
    + ","
    + _ARRIVALS
    + """
SELECT jb, step, rk, sum(was_last) AS last,
       sum(CASE WHEN was_last = 1 THEN waited ELSE 0 END) AS caused_ns, count(*) AS collectives
FROM matched WHERE step IS NOT NULL GROUP BY jb, step, rk
"""
)

# Per rank, for live figures over a trailing window: a window cuts each rank's calls at a
# different point, so the k-th call of the window is not one collective across ranks.
# Calls are matched instead by (process group, step, order within the step), in the
# steps where every rank of the group has as many calls as the others (a step the cut
# went through on one rank is left out).
WINDOW_ARRIVAL_COLUMNS = ("rk", "jb", "matched", "skew_sum", "skew_max", "last")
WINDOW_ARRIVALS = (
    _BODY
    + f""",
wst AS (
  SELECT rk, jb, pg, coalesce(step, -1) AS step, s,
         row_number() OVER (PARTITION BY rk, pg, coalesce(step, -1) ORDER BY k) AS kk,
         count(*) OVER (PARTITION BY rk, pg, coalesce(step, -1)) AS calls
  FROM calls_out
),
wranks AS (SELECT jb, pg, count(DISTINCT rk) AS ranks FROM calls_out GROUP BY jb, pg),
wwhole AS (
  SELECT w.jb, w.pg, w.step FROM wst w
  JOIN wranks r ON r.jb = w.jb AND r.pg = w.pg
  GROUP BY w.jb, w.pg, w.step, r.ranks
  HAVING min(w.calls) = max(w.calls) AND count(DISTINCT w.rk) = r.ranks AND r.ranks >= 2
),
warr AS (
  SELECT w.rk, w.jb, w.pg, w.step, w.kk, w.s,
         min(w.s) OVER p AS first_s, max(w.s) OVER p AS last_s,
         row_number() OVER (PARTITION BY w.jb, w.pg, w.step, w.kk ORDER BY w.s DESC, w.rk)
           AS late
  FROM wst w JOIN wwhole h ON h.jb = w.jb AND h.pg = w.pg AND h.step = w.step
  WINDOW p AS (PARTITION BY w.jb, w.pg, w.step, w.kk)
),
wru AS (SELECT jb, pg, step, kk, s AS s2 FROM warr WHERE late = 2)
SELECT a.rk, a.jb, count(*) AS matched, sum(a.s - a.first_s) AS skew_sum,
       max(a.s - a.first_s) AS skew_max,
       sum(CASE WHEN a.late = 1 AND a.last_s - b.s2 > {TIE_NS} THEN 1 ELSE 0 END) AS last
FROM warr a JOIN wru b ON b.jb = a.jb AND b.pg = a.pg AND b.step = a.step AND b.kk = a.kk
GROUP BY a.rk, a.jb
"""
)
