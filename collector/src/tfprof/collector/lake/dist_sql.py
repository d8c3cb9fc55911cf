"""Steps, collectives and arrivals of distributed jobs, as SQL: one text per question that
DuckDB runs for the CLI (over the read engine's clipped relations) and for ``sql`` (over
the lake's tables), and that Spark SQL runs unchanged over the same Parquet files.

Each statement reads three normalised inputs, written by an adapter (``ENGINE`` for the
read engine, ``LAKE`` for the lake's tables):

- ``gpu``: kernels, copies, memsets (``rk`` the rank's process key, ``jb`` its job,
  ``device``, ``kind`` 1 kernel / 2 copy / 3 memset, ``name``, ``s``, ``e`` ns,
  ``corr`` the CUDA correlation id, ``stream``, and a kernel's collective args);
- ``calls``: CUDA API calls (``rk``, ``thread``, ``name``, ``s``, ``e``, ``corr``);
- ``marks``: step starts (``rk``, ``num``, ``s``, ``e``, ``src``: 1 a framework step
  range ``ProfilerStep#N``, 2 a STEP record of the hook's zero-code markers);
- ``ranges``: host ranges named ``nccl:<op>`` or after an NCCL call (``RANGE_NAME``;
  ``rk``, ``thread``, ``name``, ``s``, ``e``).

Only portable SQL: window functions with ROWS frames, CASE, LIKE, joins on equality, no
ASOF or range joins (a launch finds its step by a running max over one time order), and
integers out; callers divide. Intervals are unions as "islands" (a running max of ends,
touching intervals merged, as HTA merges them) and a partition of time into elementary
segments (a running count of open islands per class), so the cost is a few sorts of the
records, never a join of two interval sets.
"""

from __future__ import annotations

from dataclasses import dataclass

# Communication kernels by name: HTA's ``^nccl.*Kernel`` class, RCCL and lower case too;
# and NCCL's ``oneRankReduce``, what a one-rank communicator runs for a reduction that
# is not a plain sum (an average: PreMulSum) instead of a ring kernel (seen on an H200,
# NCCL 2.28: bench/results/gpu_features-h200.txt).
COMM_NAME = (
    "(lower(@N@) LIKE 'nccl%kernel%' OR lower(@N@) LIKE 'rccl%kernel%' "
    "OR lower(@N@) LIKE '%onerankreduce%')"
)
# Host ranges that say which collective a launch ran: PyTorch's ``nccl:<op>`` annotation
# and NCCL's own NVTX ranges, named after its API call (``ncclAllReduce``).
NCCL_CALLS = ("ncclAllReduce", "ncclAllGather", "ncclReduceScatter", "ncclBroadcast",
              "ncclBcast", "ncclReduce", "ncclAlltoAll", "ncclAllToAll", "ncclAlltoAllv",
              "ncclSend", "ncclRecv", "ncclGather", "ncclScatter")  # fmt: skip
RANGE_NAME = f"(name LIKE 'nccl:%' OR name IN ({', '.join(repr(n) for n in NCCL_CALLS)}))"
# A range's operation: ``nccl:all_reduce`` -> ``all_reduce``, ``ncclAllReduce`` -> ``AllReduce``.
RANGE_OP = "CASE WHEN @N@ LIKE 'nccl:%' THEN substr(@N@, 6) ELSE substr(@N@, 5) END"
# Kineto's "Collective name" and a kernel's name, as one collective type.
_TYPES = (
    ("allreduce", ("allreduce", "all_reduce", "allreduce_coalesced", "nccl:all_reduce")),
    ("allgather", ("allgather", "all_gather", "_allgather_base", "_all_gather_base",
                   "all_gather_into_tensor_coalesced", "allgather_into_tensor_coalesced",
                   "allgather_coalesced")),
    ("reducescatter", ("reducescatter", "reduce_scatter", "_reduce_scatter_base",
                       "reduce_scatter_tensor_coalesced")),
    ("alltoall", ("all_to_all", "all_to_allv", "alltoall", "alltoall_base", "alltoallv")),
    ("broadcast", ("broadcast", "bcast")),
    ("reduce", ("reduce",)),
    ("sendrecv", ("send", "recv", "sendrecv")),
    ("barrier", ("barrier",)),
    ("gather", ("gather",)),
    ("scatter", ("scatter",)),
)  # fmt: skip
# By kernel name, in this order (AllReduce and ReduceScatter before Reduce); no ESCAPE:
# Spark and DuckDB read a backslash in a literal differently.
_NAME_TYPES = (
    ("allreduce", "%allreduce%"), ("reducescatter", "%reducescatter%"),
    ("allgather", "%allgather%"), ("alltoall", "%alltoall%"), ("broadcast", "%broadcast%"),
    ("sendrecv", "%sendrecv%"), ("reduce", "%reduce%"),
)  # fmt: skip


def type_of_args(col: str) -> str:
    whens = " ".join(
        f"WHEN lower({col}) IN ({', '.join(repr(n) for n in names)}) THEN '{t}'"
        for t, names in _TYPES
    )
    return f"CASE {whens} ELSE lower({col}) END"


def type_of_name(col: str) -> str:
    whens = " ".join(f"WHEN lower({col}) LIKE '{pat}' THEN '{t}'" for t, pat in _NAME_TYPES)
    return f"CASE {whens} ELSE 'unknown' END"


@dataclass(frozen=True)
class Adapter:
    """The four inputs as SELECTs over one engine's relations."""

    gpu: str
    calls: str
    marks: str
    ranges: str

    def bind(self, body: str) -> str:
        return (
            f"WITH gpu AS ({self.gpu}), calls AS ({self.calls}), marks0 AS ({self.marks}), "
            f"ranges AS ({self.ranges}), {body}"
        )


_COLL = ("collective AS coll, coll_in_nelems AS coll_in, coll_out_nelems AS coll_out, "
         "coll_group_size AS coll_n, coll_dtype, coll_pg_name AS pg_name")  # fmt: skip
_PROFILER_STEP = "name LIKE 'ProfilerStep#%'"
_STEP_NUM = "CAST(substr(name, 14) AS BIGINT)"

# The read engine's clipped relations ({g}, {h}, {st}: ``read.clipped_sql``).
ENGINE = Adapter(
    gpu=f"SELECT process AS rk, job AS jb, device, kind, name, s, e, correlation AS corr, "
    f"stream, {_COLL} FROM {{g}} WHERE kind <= 3",
    calls="SELECT process AS rk, thread, name, s, e, correlation AS corr FROM {h} WHERE kind = 5",
    marks=f"SELECT process AS rk, {_STEP_NUM} AS num, s, e, 1 AS src FROM {{h}} "
    f"WHERE kind = 6 AND {_PROFILER_STEP} "
    "UNION ALL SELECT process AS rk, external_id AS num, s, e, 2 AS src FROM {st}",
    ranges="SELECT process AS rk, thread, name, s, e FROM {h} WHERE kind = 6 "
    f"AND {RANGE_NAME} AND (domain IS NULL OR domain <> 'gpu_user_annotation')",
)

# The lake's tables as ``sql`` (DuckDB) and Spark name them: one rank is (job, run, task).
_RK = "concat(job, '|', run, '|', task)"
_T = "start_ns AS s, start_ns + greatest(duration_ns, 0) AS e"
LAKE = Adapter(
    gpu=f"SELECT {_RK} AS rk, job AS jb, device, 1 AS kind, name, {_T}, correlation AS corr, "
    f"stream, {_COLL} FROM kernels UNION ALL "
    f"SELECT {_RK}, job, device, 2, name, {_T}, correlation, stream, NULL, NULL, NULL, NULL, "
    "NULL, NULL FROM copies UNION ALL "
    f"SELECT {_RK}, job, device, 3, name, {_T}, correlation, stream, NULL, NULL, NULL, NULL, "
    "NULL, NULL FROM memsets",
    calls=f"SELECT {_RK} AS rk, thread, name, {_T}, correlation AS corr FROM api_calls",
    marks=f"SELECT {_RK} AS rk, {_STEP_NUM} AS num, {_T}, 1 AS src FROM markers "
    f"WHERE {_PROFILER_STEP} UNION ALL SELECT {_RK}, step, {_T}, 2 FROM steps",
    ranges=f"SELECT {_RK} AS rk, thread, name, {_T} FROM markers WHERE {RANGE_NAME} "
    "AND (domain IS NULL OR domain <> 'gpu_user_annotation')",
)

# GPU records with their launching call (one per correlation id of a rank) and class:
# 1 compute, 2 communication, 3 copy or memset.
_LAUNCHED = f"""
launch AS (
  SELECT rk, corr, min(s) AS ls, min(thread) AS thread
  FROM calls WHERE corr <> 0 GROUP BY rk, corr
),
g AS (
  SELECT g.rk, g.jb, g.device, g.kind, g.name, g.s, g.e, g.corr, g.stream, l.ls, l.thread,
         g.coll, g.coll_in, g.coll_out, g.coll_n, g.coll_dtype, g.pg_name,
         CASE WHEN g.kind <> 1 THEN 3 WHEN {COMM_NAME.replace("@N@", "g.name")} THEN 2
              ELSE 1 END AS cls
  FROM gpu g LEFT JOIN launch l ON l.rk = g.rk AND l.corr = g.corr AND g.corr <> 0
)"""

# Steps from the kernel stream's period, for ranks with no step marks: the anchor is a
# kernel name that runs once a step (its count is the commonest count among names seen
# twice or more, give or take one), the most regular one, and among the regular ones
# the one whose launch follows the longest host pause on its thread; its launches are the
# step starts.
_PERIODIC = """
nomark AS (
  SELECT DISTINCT g.rk FROM g LEFT JOIN (SELECT DISTINCT rk FROM marks0) m ON m.rk = g.rk
  WHERE m.rk IS NULL AND g.ls IS NOT NULL
),
ncount AS (
  SELECT g.rk, g.name, count(*) AS n FROM g JOIN nomark x ON x.rk = g.rk
  WHERE g.ls IS NOT NULL AND g.kind = 1 GROUP BY g.rk, g.name
),
modes AS (SELECT rk, n, count(*) AS names FROM ncount WHERE n >= 2 GROUP BY rk, n),
kmode AS (
  SELECT rk, n AS k FROM (
    SELECT rk, n, row_number() OVER (PARTITION BY rk ORDER BY names DESC, n DESC) AS r
    FROM modes) AS m1 WHERE r = 1
),
cand AS (
  SELECT c.rk, c.name FROM ncount c JOIN kmode k ON c.rk = k.rk
  WHERE c.n >= k.k - 1 AND c.n <= k.k + 1
),
hgap AS (
  SELECT c.rk, c.corr,
         c.s - lag(c.e) OVER (PARTITION BY c.rk, c.thread ORDER BY c.s, c.e) AS hg
  FROM calls c JOIN nomark x ON x.rk = c.rk
),
occ AS (
  SELECT g.rk, g.name, g.ls, coalesce(h.hg, 0) AS hg,
         lead(g.ls) OVER (PARTITION BY g.rk, g.name ORDER BY g.ls) - g.ls AS gap
  FROM g JOIN cand c ON g.rk = c.rk AND g.name = c.name
  LEFT JOIN hgap h ON h.rk = g.rk AND h.corr = g.corr
  WHERE g.ls IS NOT NULL AND g.kind = 1
),
cv AS (
  SELECT rk, name, stddev_pop(gap) / avg(gap) AS cv, avg(hg) AS hg
  FROM occ WHERE gap IS NOT NULL GROUP BY rk, name HAVING avg(gap) > 0
),
regular AS (
  SELECT c.rk, c.name, c.hg FROM cv c
  JOIN (SELECT rk, min(cv) AS best FROM cv GROUP BY rk) b ON b.rk = c.rk
  WHERE c.cv <= greatest(0.05, 1.5 * b.best)
),
anchor AS (
  SELECT rk, name FROM (
    SELECT rk, name, row_number() OVER (PARTITION BY rk ORDER BY hg DESC, name) AS r
    FROM regular) AS a1 WHERE r = 1
),
marks AS (
  SELECT rk, num, s, e, src FROM marks0
  UNION ALL
  SELECT o.rk, row_number() OVER (PARTITION BY o.rk ORDER BY o.ls) - 1, o.ls,
         CAST(NULL AS BIGINT), 3
  FROM occ o JOIN anchor a ON o.rk = a.rk AND o.name = a.name
)"""

# A rank's steps from its best source (framework ranges, else hook marks, else the
# period): step N's launches are those whose call starts in [start N, start N+1); the
# last framework or periodic step has no next start, its work is cut off by the end of
# the capture: it is not complete and no figure counts it (HTA leaves it out too).
_RANGES = """
pick AS (SELECT rk, min(src) AS src FROM marks GROUP BY rk),
ordered_marks AS (
  SELECT m.rk, m.num, m.src, m.s AS lo, m.e AS mark_e,
         lead(m.s) OVER (PARTITION BY m.rk ORDER BY m.s, m.num) AS nxt,
         row_number() OVER (PARTITION BY m.rk ORDER BY m.s, m.num) AS ord
  FROM marks m JOIN pick p ON m.rk = p.rk AND m.src = p.src
),
rng AS (
  SELECT rk, num, src, ord, lo,
         CASE WHEN nxt IS NOT NULL THEN nxt WHEN src = 2 THEN mark_e
              ELSE coalesce(mark_e, lo) END AS hi,
         CASE WHEN nxt IS NOT NULL OR src = 2 THEN 1 ELSE 0 END AS complete
  FROM ordered_marks
)"""
# Each GPU record with the step its launch falls in (``ord``: complete steps only).
_OWN = """
tl AS (
  SELECT rk, lo AS t, 0 AS isg, ord, CAST(NULL AS BIGINT) AS device, 0 AS cls,
         CAST(0 AS BIGINT) AS s, CAST(0 AS BIGINT) AS e, CAST(0 AS BIGINT) AS corr
  FROM rng
  UNION ALL
  SELECT rk, ls, 1, CAST(NULL AS BIGINT), device, cls, s, e, corr FROM g WHERE ls IS NOT NULL
),
tagged AS (
  SELECT rk, device, cls, s, e, corr, t AS ls, isg,
         max(ord) OVER (PARTITION BY rk ORDER BY t, isg ROWS UNBOUNDED PRECEDING) AS ord
  FROM tl
),
own AS (
  SELECT t.rk, t.device, t.cls, t.s, t.e, t.ls, t.corr,
         CASE WHEN t.ls < r.hi THEN r.num END AS num,
         CASE WHEN r.complete = 1 AND t.ls < r.hi THEN t.ord END AS ord
  FROM tagged t LEFT JOIN rng r ON r.rk = t.rk AND r.ord = t.ord WHERE t.isg = 1
)"""

# Device windows: step N's ends at the last end of its own work (never before step N-1's)
# and starts where N-1's ended (the first: at its first own work), so the windows tile
# the device time of the complete steps: HTA's span.
_WINDOWS = """
wstep AS (
  SELECT rk, device, ord, min(s) AS s0, max(e) AS e0, min(ls) AS first_launch,
         count(*) AS records
  FROM own WHERE ord IS NOT NULL GROUP BY rk, device, ord
),
wcum AS (
  SELECT rk, device, ord, s0, first_launch, records,
         max(e0) OVER (PARTITION BY rk, device ORDER BY ord ROWS UNBOUNDED PRECEDING) AS hi
  FROM wstep
),
win AS (
  SELECT rk, device, ord, first_launch, records, hi,
         coalesce(lag(hi) OVER (PARTITION BY rk, device ORDER BY ord), s0) AS lo
  FROM wcum
)"""

# Interval classes: 1-3 the complete steps' own compute, communication, copies; 4 any
# other GPU work (launched before the capture, outside a step, by an incomplete step);
# 5 blocking CUDA calls, 6 other CUDA calls, on the threads that launch GPU work.
_ISLANDS = """
devs AS (SELECT DISTINCT rk, device FROM win),
lthreads AS (SELECT DISTINCT rk, thread FROM g WHERE ls IS NOT NULL),
copyend AS (SELECT rk, corr, max(e) AS ce FROM g WHERE cls = 3 AND corr <> 0 GROUP BY rk, corr),
hostcalls AS (
  SELECT c.rk, c.s, c.e,
         CASE WHEN c.name LIKE '%Synchronize%'
                OR ((c.name LIKE 'cudaMemcpy%' OR c.name LIKE 'cuMemcpy%')
                    AND c.name NOT LIKE '%Async%')
                OR (c.name LIKE '%Memcpy%Async%' AND x.ce IS NOT NULL AND x.ce <= c.e)
              THEN 5 ELSE 6 END AS cls
  FROM calls c JOIN lthreads t ON t.rk = c.rk AND t.thread = c.thread
  LEFT JOIN copyend x ON x.rk = c.rk AND x.corr = c.corr
),
iv AS (
  SELECT o.rk, o.device, CASE WHEN o.ord IS NULL THEN 4 ELSE o.cls END AS cls, o.s, o.e
  FROM own o JOIN devs d ON d.rk = o.rk AND d.device = o.device
  UNION ALL
  SELECT g.rk, g.device, 4, g.s, g.e FROM g JOIN devs d ON d.rk = g.rk AND d.device = g.device
  WHERE g.ls IS NULL
  UNION ALL
  SELECT h.rk, d.device, h.cls, h.s, h.e FROM hostcalls h JOIN devs d ON d.rk = h.rk
),
-- One row per start: the two window passes below then see one total order (rows tied
-- on (s, e) could come in either order in each pass, and a row that a pass put second
-- would close the previous island's gap).
ivs AS (SELECT rk, device, cls, s, max(e) AS e FROM iv GROUP BY rk, device, cls, s),
reach AS (
  SELECT rk, device, cls, s, e,
         max(e) OVER (PARTITION BY rk, device, cls ORDER BY s
                      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS r
  FROM ivs
),
isl AS (
  SELECT rk, device, cls, s, e,
         sum(CASE WHEN r IS NULL OR s > r THEN 1 ELSE 0 END)
           OVER (PARTITION BY rk, device, cls ORDER BY s ROWS UNBOUNDED PRECEDING) AS island
  FROM reach
),
islands AS (
  SELECT rk, device, cls, min(s) AS s, max(e) AS e FROM isl GROUP BY rk, device, cls, island
)"""

# Elementary segments: between consecutive instants, which classes are open and which
# window holds it (window marks 2N at its start, 2N+1 at its end: the running max is the
# latest, odd outside every window). A class's islands never overlap or touch, so at
# most one of each is open: the open classes are one running sum of 2^class per event
# (a bit set), one window aggregate where a count per class took six, which a 10M-record
# rank could not sort under the read's memory limit.
_SEGMENTS = """
ev AS (
  SELECT rk, device, s AS t, cls, 1 AS delta, -1 AS w FROM islands
  UNION ALL SELECT rk, device, e, cls, -1, -1 FROM islands
  UNION ALL SELECT rk, device, lo, 0, 0, 2 * ord FROM win
  UNION ALL SELECT rk, device, hi, 0, 0, 2 * ord + 1 FROM win
),
running AS (
  SELECT rk, device, t,
         max(w) OVER x AS wv,
         sum(delta * CASE cls WHEN 1 THEN 2 WHEN 2 THEN 4 WHEN 3 THEN 8 WHEN 4 THEN 16
                              WHEN 5 THEN 32 WHEN 6 THEN 64 ELSE 0 END) OVER x AS bits,
         lead(t) OVER (PARTITION BY rk, device ORDER BY t, w, cls, delta) AS nt
  FROM ev
  WINDOW x AS (PARTITION BY rk, device ORDER BY t, w, cls, delta ROWS UNBOUNDED PRECEDING)
),
seg AS (
  SELECT rk, device, CAST(floor(wv / 2.0) AS BIGINT) AS ord, nt - t AS len,
         CASE WHEN (bits & 2) > 0 THEN 1 ELSE 0 END AS c1,
         CASE WHEN (bits & 4) > 0 THEN 1 ELSE 0 END AS c2,
         CASE WHEN (bits & 8) > 0 THEN 1 ELSE 0 END AS c3,
         CASE WHEN (bits & 16) > 0 THEN 1 ELSE 0 END AS c4,
         CASE WHEN (bits & 32) > 0 THEN 1 ELSE 0 END AS c5,
         CASE WHEN (bits & 64) > 0 THEN 1 ELSE 0 END AS c6
  FROM running WHERE nt IS NOT NULL AND nt > t AND wv >= 0 AND wv % 2 = 0
),
agg AS (
  SELECT rk, device, ord,
    sum(CASE WHEN c1 > 0 THEN len ELSE 0 END) AS compute_ns,
    sum(CASE WHEN c2 > 0 THEN len ELSE 0 END) AS comm_ns,
    sum(CASE WHEN c2 > 0 AND c1 = 0 THEN len ELSE 0 END) AS comm_exposed_ns,
    sum(CASE WHEN c3 > 0 THEN len ELSE 0 END) AS copy_ns,
    sum(CASE WHEN c3 > 0 AND c1 = 0 AND c2 = 0 THEN len ELSE 0 END) AS copy_exposed_ns,
    sum(CASE WHEN c1 + c2 + c3 = 0 AND c4 > 0 THEN len ELSE 0 END) AS idle_foreign_ns,
    sum(CASE WHEN c1 + c2 + c3 + c4 = 0 AND c5 > 0 THEN len ELSE 0 END) AS idle_sync_ns,
    sum(CASE WHEN c1 + c2 + c3 + c4 + c5 = 0 AND c6 > 0 THEN len ELSE 0 END)
      AS idle_other_cuda_ns
  FROM seg GROUP BY rk, device, ord
)"""

# One row per (rank, device, complete step): the figures of SPEC's steps view, in ns.
STEP_COLUMNS = (
    "rk", "device", "step", "source", "step_start_ns", "host_ns", "first_launch_ns",
    "records", "start_ns", "duration_ns", "compute_ns", "comm_ns", "comm_exposed_ns",
    "copy_ns", "copy_exposed_ns", "idle_foreign_ns", "idle_sync_ns", "idle_other_cuda_ns",
)  # fmt: skip
STEPS = (
    ",".join((_LAUNCHED, _PERIODIC, _RANGES, _OWN, _WINDOWS, _ISLANDS, _SEGMENTS))
    + """
SELECT w.rk, w.device, r.num AS step,
       CASE r.src WHEN 1 THEN 'ProfilerStep' WHEN 2 THEN 'hook' ELSE 'periodicity' END
         AS source,
       r.lo AS step_start_ns, r.hi - r.lo AS host_ns, w.first_launch - r.lo AS first_launch_ns,
       w.records, w.lo AS start_ns, w.hi - w.lo AS duration_ns,
       coalesce(a.compute_ns, 0) AS compute_ns, coalesce(a.comm_ns, 0) AS comm_ns,
       coalesce(a.comm_exposed_ns, 0) AS comm_exposed_ns,
       coalesce(a.copy_ns, 0) AS copy_ns, coalesce(a.copy_exposed_ns, 0) AS copy_exposed_ns,
       coalesce(a.idle_foreign_ns, 0) AS idle_foreign_ns,
       coalesce(a.idle_sync_ns, 0) AS idle_sync_ns,
       coalesce(a.idle_other_cuda_ns, 0) AS idle_other_cuda_ns
FROM win w JOIN rng r ON r.rk = w.rk AND r.ord = w.ord
LEFT JOIN agg a ON a.rk = w.rk AND a.device = w.device AND a.ord = w.ord
"""
)

# The complete steps of the ranks with no step marks, from the period alone: one row per
# (rank, step), its host range [lo, hi) (``compare.diff_steps``' third source).
PERIODIC_STEPS = (
    ",".join((_LAUNCHED, _PERIODIC, _RANGES))
    + "\nSELECT rk, num, lo, hi FROM rng WHERE src = 3 AND complete = 1"
)

# Pieces other statements build on (``collective_sql``).
LAUNCHED, PERIODIC, RANGES = _LAUNCHED, _PERIODIC, ",".join((_RANGES, _OWN))
