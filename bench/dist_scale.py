"""Time and peak RSS of the distributed analyses at scale, as a user types them.

Builds (once, reused) lakes under ``--data`` from a shipped Kineto NCCL trace
(``nccl_allreduce_rank0_of2.json.gz``: 3,774 GPU records and 23,158 host records a
copy): the trace is imported and compacted, then its segment repeated back to back
(times shifted by the trace's span each copy, correlation and external ids shifted,
``ProfilerStep#N`` renumbered, rank r shifted r us so arrivals differ), in files of
``COPIES_PER_FILE`` copies written as compaction writes a long run's segments (sorted by
start, said in each row group's footer, row groups of ``lake.fs.ROW_GROUP_ROWS``):

- ``one-<N>``: one process with N GPU records;
- ``ranks-<R>x<M>``: R ranks (one stream and GPU each) with M GPU records each.

For each lake it runs, each in its own process, measured with ``wait4`` (wall time and
the child's peak RSS): ``tfprof-collector summary --data-dir LAKE --view ranks``,
``tfprof-collector advise --data-dir LAKE``, and a hand-written DuckDB query over the
same Parquet files (per rank: GPU records, kernel time, median ProfilerStep duration).
A line starting ``!`` says a command's SQL did not fit the read's DuckDB memory limit
and ran again without it (``read.staged_sql``), or that the command failed.

    .venv/bin/python bench/dist_scale.py [--data /tmp/tfprof-dist-scale]
        [--one 10000000] [--ranks 64 --per-rank 1000000]

Asserts nothing; the data stays for the next run (delete ``--data`` to rebuild).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tfprof.collector.lake.fs import COMPRESSION, ROW_GROUP_ROWS

REPO = Path(__file__).resolve().parent.parent
TRACE = REPO / "tests/data/traces/kineto-hta-dist/nccl_allreduce_rank0_of2.json.gz"
CLI = [sys.executable, "-m", "tfprof.collector.cli"]
RECORDS = ("kernels", "copies", "memsets", "api_calls", "markers")
GPU = ("kernels", "copies", "memsets")
META = ("streams", "devices", "goodbyes")
COPIES_PER_FILE = 64
STEP = re.compile(r"^ProfilerStep#(\d+)$")


def template(work: Path) -> tuple[dict[str, pa.Table], str, str, str]:
    """The trace imported and compacted: its tables, collector id, job, run."""
    subprocess.run([*CLI, "import", str(TRACE), "--job", "scale", "--data-dir",
                    str(work / "data")], check=True, capture_output=True)  # fmt: skip
    subprocess.run([*CLI, "compact", "--data-dir", str(work / "data")], check=True,
                   capture_output=True)  # fmt: skip
    tables = {}
    for name in (*RECORDS, *META):
        (path,) = (work / "data/lake" / name).glob("job=*/run=*/*.parquet")
        tables[name] = pq.read_table(path)
    run_dir = path.parent
    collector = path.name.split("~")[0]
    return tables, collector, run_dir.parent.name[4:], run_dir.name[4:]


def _set(table: pa.Table, column: str, values: pa.Array) -> pa.Table:
    i = table.schema.get_field_index(column)
    return table.set_column(i, table.schema.field(i), values.cast(table.schema.field(i).type))


def _copy(t: pa.Table, name: str, k: int, rank: int, shape: dict[str, int]) -> pa.Table:
    """Copy k of template table ``t`` as rank ``rank``."""
    shift = k * shape["period"] + rank * 1000
    t = _set(t, "start_ns", pc.add(t["start_ns"], shift))
    t = _set(t, "stream_id", pa.array([f"rank-{rank}"] * t.num_rows))
    t = _set(t, "task", pa.array([str(rank)] * t.num_rows))
    if "correlation" in t.column_names:
        t = _set(t, "correlation", pc.add(t["correlation"].cast(pa.int64()), k * shape["corr"]))
    if "external_id" in t.column_names:
        t = _set(t, "external_id", pc.add(t["external_id"], k * shape["ext"]))
    if name == "markers":
        names = [
            f"ProfilerStep#{int(m.group(1)) + k * shape['steps']}" if (m := STEP.match(n)) else n
            for n in t["name"].cast(pa.string()).to_pylist()
        ]
        t = _set(t, "name", pa.array(names))
    return t


def build(root: Path, ranks: int, gpu_per_rank: int) -> Path:
    """A lake of ``ranks`` ranks with about ``gpu_per_rank`` GPU records each."""
    if (root / "done").exists():
        return root
    with tempfile.TemporaryDirectory(prefix="tfprof-scale-") as tmp:
        tables, collector, job, run = template(Path(tmp))
    gpu_rows = sum(tables[n].num_rows for n in GPU)
    copies = max(1, round(gpu_per_rank / gpu_rows))
    starts = [pc.min(tables[n]["start_ns"]).as_py() for n in RECORDS]
    ends = [pc.max(pc.add(tables[n]["start_ns"], tables[n]["duration_ns"])).as_py()
            for n in RECORDS]  # fmt: skip
    steps = [int(m.group(1)) for n in tables["markers"]["name"].cast(pa.string()).to_pylist()
             if (m := STEP.match(n))]  # fmt: skip
    shape = {
        "period": max(ends) - min(starts) + 1_000_000,
        "corr": max(pc.max(tables[n]["correlation"]).as_py() for n in (*GPU, "api_calls")) + 1,
        "ext": 1
        + max(
            pc.max(tables[n]["external_id"]).as_py() or 0
            for n in ("kernels", "api_calls", "markers")
        ),
        "steps": max(steps) - min(steps) + 1,
    }
    part = f"job={job}/run={run}"
    for rank in range(ranks):
        for first in range(0, copies, COPIES_PER_FILE):
            block = range(first, min(copies, first + COPIES_PER_FILE))
            seq = first // COPIES_PER_FILE + 1
            file = f"{collector}~rank-{rank}~{seq:012d}-{seq:012d}.parquet"
            for name in RECORDS:
                out = root / name / part
                out.mkdir(parents=True, exist_ok=True)
                pieces = [_copy(tables[name], name, k, rank, shape) for k in block]
                _write(pa.concat_tables(pieces), out / file)
        for name in META:
            t = tables[name]
            t = _set(t, "stream_id", pa.array([f"rank-{rank}"] * t.num_rows))
            if "task" in t.column_names:
                t = _set(t, "task", pa.array([str(rank)] * t.num_rows))
            if "uuid" in t.column_names:
                t = _set(t, "uuid", pa.array([f"bench-gpu-{rank}"] * t.num_rows))
            out = root / name / part
            out.mkdir(parents=True, exist_ok=True)
            pq.write_table(t, out / f"{collector}~rank-{rank}~000000000001-000000000001.parquet")
    (root / "done").write_text(f"{ranks} ranks x {copies} copies of {gpu_rows} GPU records\n")
    return root


def _write(table: pa.Table, path: Path) -> None:
    """As compaction writes a segment (``lake.fs``): sorted by start, said in each row
    group's footer, so the read streams each row group a batch at a time."""
    table = table.take(pc.sort_indices(table, [("start_ns", "ascending")]))
    pq.write_table(
        table, path, compression=COMPRESSION, row_group_size=ROW_GROUP_ROWS,
        use_dictionary=True, write_page_checksum=True,
        sorting_columns=[pq.SortingColumn(table.schema.get_field_index("start_ns"))],
    )  # fmt: skip


def measure(argv: list[str]) -> tuple[float, float, int]:
    """Wall seconds, the child's peak RSS (MiB) and exit status of one command."""
    with tempfile.TemporaryFile() as stderr:  # a file: a pipe read after wait4 could fill
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=stderr)
        _pid, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        stderr.seek(0)
        err = stderr.read().decode(errors="replace")
    for line in err.splitlines():
        if "ran out of DuckDB" in line:  # the read's memory limit did not hold: say so
            print(f"   ! {line[:200]}")
    if proc.returncode:
        print(f"   ! {' '.join(argv[3:])}: exit {proc.returncode}: {err[-300:]}")
    return wall, usage.ru_maxrss / 1024, proc.returncode


DUCKDB = """
import sys, duckdb
lake = sys.argv[1]
con = duckdb.connect()
p = lambda t: f"read_parquet('{lake}/{t}/*/*/*.parquet', hive_partitioning=true)"
print(con.execute(f'''
  WITH g AS (SELECT task, 1 AS k, duration_ns FROM {p("kernels")}
             UNION ALL SELECT task, 0, duration_ns FROM {p("copies")}
             UNION ALL SELECT task, 0, duration_ns FROM {p("memsets")}),
  per AS (SELECT task, count(*) AS records, sum(k * duration_ns) AS kernel_ns
          FROM g GROUP BY task),
  st AS (SELECT task, median(duration_ns) AS step_ns FROM {p("markers")}
         WHERE name LIKE 'ProfilerStep#%' GROUP BY task)
  SELECT per.*, st.step_ns FROM per LEFT JOIN st USING (task) ORDER BY task''').fetchall())
"""


def report(lake: Path) -> None:
    gpu = sum(pq.ParquetFile(f).metadata.num_rows for n in GPU
              for f in (lake / n).rglob("*.parquet"))  # fmt: skip
    host = sum(pq.ParquetFile(f).metadata.num_rows for n in ("api_calls", "markers")
               for f in (lake / n).rglob("*.parquet"))  # fmt: skip
    ranks = len(list((lake / "streams").rglob("*.parquet")))
    print(f"\n== {lake.name}: {ranks} rank(s), {gpu:,} GPU records, {host:,} host records")
    rows = [
        ("tfprof-collector summary --data-dir LAKE --view ranks",
         [*CLI, "summary", "--data-dir", str(lake), "--view", "ranks"]),
        ("tfprof-collector advise --data-dir LAKE", [*CLI, "advise", "--data-dir", str(lake)]),
        ("hand-written DuckDB query (per rank: records, kernel ns, median step)",
         [sys.executable, "-c", DUCKDB, str(lake)]),
    ]  # fmt: skip
    base = None
    for label, argv in rows[::-1]:  # the DuckDB query first: the ratios' base
        wall, rss, code = measure(argv)
        base = base or wall
        ratio = f"{wall / base:6.1f}x" if code == 0 else "failed"
        print(f"   {label:<72} {wall:8.1f} s  peak RSS {rss:7.0f} MiB  {ratio}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=Path("/tmp/tfprof-dist-scale"))
    p.add_argument("--one", type=int, nargs="*", default=[10_000_000],
                   help="GPU records of the one-process lakes")  # fmt: skip
    p.add_argument("--ranks", type=int, default=64)
    p.add_argument("--per-rank", type=int, default=1_000_000)
    p.add_argument("--build-only", action="store_true")
    args = p.parse_args()
    lakes = [build(args.data / f"one-{n}", 1, n) for n in args.one]
    if args.ranks:
        lakes.append(build(args.data / f"ranks-{args.ranks}x{args.per_rank}", args.ranks,
                           args.per_rank))  # fmt: skip
    if not args.build_only:
        for lake in lakes:
            report(lake)


if __name__ == "__main__":
    main()
