"""The DuckDB anchors of ``read_scale.py``: for each ``summary`` view, a query a user
would write by hand over the same Parquet files that yields the view's figures, run as
its own process (``python -c``), every row fetched.

The queries are written for the bench's lake (one job, one process, GPU = device):
they are yardsticks, not the collector's implementation. ``{lake}`` is the lake dir.
"""

from __future__ import annotations

_T = "read_parquet('{lake}/%s/**/*.parquet', hive_partitioning = true)"
KERNELS, COPIES, MEMSETS, SYNCS = (_T % t for t in ("kernels", "copies", "memsets", "syncs"))

# Every record occupying a GPU, durations clamped at zero as the analyses do.
_ON_GPU = f"""
  SELECT job, device, stream, start_ns AS s, start_ns + greatest(duration_ns, 0) AS e
  FROM {KERNELS}
  UNION ALL SELECT job, device, stream, start_ns, start_ns + greatest(duration_ns, 0)
  FROM {COPIES}
  UNION ALL SELECT job, device, stream, start_ns, start_ns + greatest(duration_ns, 0)
  FROM {MEMSETS}
"""


def _islands(source: str, key: str) -> str:
    """The union of ``source``'s intervals per ``key``: one row per island (key, s, e).
    An interval opens an island when it starts after every earlier one has ended
    (touching intervals merge)."""
    return f"""
  SELECT {key}, min(s) AS s, max(e) AS e FROM (
    SELECT *, sum(CASE WHEN reach IS NULL OR s > reach THEN 1 ELSE 0 END)
                OVER (PARTITION BY {key} ORDER BY s, e ROWS UNBOUNDED PRECEDING) AS island
    FROM (SELECT *, max(e) OVER (PARTITION BY {key} ORDER BY s, e
                                 ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach
          FROM ({source})))
  GROUP BY {key}, island"""


# The kernels view without its busy share: the query issue 27 timed as its anchor.
KERNELS_GROUP_BY = f"""
SELECT name, count(*), sum(d), avg(d), median(d), min(d), max(d), stddev_samp(d)
FROM (SELECT name, greatest(duration_ns, 0) AS d FROM {KERNELS}) GROUP BY name
"""


def _kernels(by: str) -> str:
    return f"""
WITH busy AS (SELECT sum(e - s) AS ns FROM ({_islands(_ON_GPU, "device")}))
SELECT {by}, count(*), sum(d), avg(d), median(d), min(d), max(d), stddev_samp(d),
       100 * sum(d) / (SELECT ns FROM busy)
FROM (SELECT job, name, greatest(duration_ns, 0) AS d FROM {KERNELS}) GROUP BY {by}
"""


STREAMS = f"""
WITH busy AS (SELECT device, stream, sum(e - s) AS ns
              FROM ({_islands(_ON_GPU, "device, stream")}) GROUP BY ALL),
counts AS (
  SELECT device, stream, count(*) FILTER (kind = 1) AS kernels,
         count(*) FILTER (kind = 2) AS copies, count(*) FILTER (kind = 3) AS memsets,
         count(*) FILTER (kind = 4) AS syncs, sum(d) FILTER (kind = 4) AS sync_ns
  FROM (SELECT 1 AS kind, device, stream, 0 AS d FROM {KERNELS}
        UNION ALL SELECT 2, device, stream, 0 FROM {COPIES}
        UNION ALL SELECT 3, device, stream, 0 FROM {MEMSETS}
        UNION ALL SELECT 4, device, stream, greatest(duration_ns, 0) FROM {SYNCS})
  GROUP BY ALL)
SELECT * FROM counts LEFT JOIN busy USING (device, stream)
"""

GPUS = f"""
WITH islands AS ({_islands(_ON_GPU, "device")}),
gaps AS (SELECT device, lag(e) OVER (PARTITION BY device ORDER BY s) AS gs, s AS ge
         FROM islands)
SELECT device, (SELECT sum(e - s) FROM islands i WHERE i.device = g.device) AS busy,
       list(ge - gs ORDER BY ge - gs DESC, gs)[1:3] AS longest
FROM gaps g WHERE gs IS NOT NULL GROUP BY device
"""

# Copy time with a kernel running on the same GPU: the kernels' union per GPU, each
# island with the busy time before it; a copy's cover is that running total at its end
# less at its start (ASOF: the last island starting at or before the instant).
MEMCPY = f"""
WITH k AS ({
    _islands(
        f"SELECT device, start_ns AS s, start_ns + greatest(duration_ns, 0) AS e FROM {KERNELS}",
        "device",
    )
}),
run AS (SELECT device, s, e, sum(e - s) OVER (PARTITION BY device ORDER BY s) - (e - s)
               AS before FROM k),
c AS (SELECT copy_kind, src_kind, dst_kind, bytes, device, start_ns AS s,
             start_ns + greatest(duration_ns, 0) AS e FROM {COPIES}),
at_s AS (SELECT c.*, coalesce(r.before + least(c.s - r.s, r.e - r.s), 0) AS cs
         FROM c ASOF LEFT JOIN run r ON c.device = r.device AND c.s >= r.s),
at_e AS (SELECT a.*, coalesce(r.before + least(a.e - r.s, r.e - r.s), 0) AS ce
         FROM at_s a ASOF LEFT JOIN run r ON a.device = r.device AND a.e >= r.s)
SELECT copy_kind, src_kind, dst_kind, count(*), sum(bytes), sum(e - s),
       sum(bytes) / sum(e - s), 100 * sum(ce - cs) / sum(e - s)
FROM at_e GROUP BY ALL
"""

JOBS = f"""
SELECT job, count(*) FILTER (kind = 1), sum(d) FILTER (kind = 1),
       count(*) FILTER (kind = 2), sum(d) FILTER (kind = 2), sum(b) FILTER (kind = 2),
       count(*) FILTER (kind = 3), sum(d) FILTER (kind = 3),
       count(*) FILTER (kind = 4), sum(d) FILTER (kind = 4),
       count(*), count(DISTINCT device)
FROM (SELECT job, 1 AS kind, device, greatest(duration_ns, 0) AS d, 0 AS b FROM {KERNELS}
      UNION ALL SELECT job, 2, device, greatest(duration_ns, 0), bytes FROM {COPIES}
      UNION ALL SELECT job, 3, device, greatest(duration_ns, 0), 0 FROM {MEMSETS}
      UNION ALL SELECT job, 4, device, greatest(duration_ns, 0), 0 FROM {SYNCS})
GROUP BY job
"""

ANCHORS: dict[str, str] = {
    "kernels": _kernels("name"),
    "kernels-by-job": _kernels("job, name"),
    "streams": STREAMS,
    "gpus": GPUS,
    "memcpy": MEMCPY,
    "jobs": JOBS,
}


def anchor_code(sql: str, lake: str) -> str:
    """The ``python -c`` program that runs one anchor and fetches every row."""
    query = sql.replace("{lake}", lake)
    return f"import duckdb; rows = duckdb.sql({query!r}).fetchall(); print(len(rows))"


def main() -> None:
    import argparse

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("lake", help="a lake dir (a data dir's lake/)")
    p.add_argument("--view", choices=sorted(ANCHORS), default="kernels")
    args = p.parse_args()
    print(ANCHORS[args.view].replace("{lake}", args.lake))


if __name__ == "__main__":
    main()
