"""Seconds and peak RSS of every GPU ``summary`` view, ``advise`` and ``export`` (every
format) over N GPU records of ONE traced process, each next to a hand-written DuckDB
query over the same Parquet files (issue 27's targets).

The data dir is built once per size under ``--work-dir`` (``read_scale_lake.py``: one
rank, two GPUs, eight streams, kernels, copies, memsets and syncs, a few thousand kernel
names, stored through the store's writer and compacted as the collector does) and
reused. Each command then runs as a user types it (``tfprof-collector summary
--data-dir D --view V``), in its own process under ``/usr/bin/time -f '%e %M'``: whole
wall time (interpreter start, imports and exit included) and peak RSS (children
included, as time reports it). Each DuckDB anchor (``read_scale_sql.py``) runs the same
way as ``python -c``. A command and its anchor alternate, ``--rounds`` times, after one
untimed run of each; medians are printed. Both run with their modules' bytecode cached
(under the work dir's ``pycache/``, PYTHONPYCACHEPREFIX), as an installed package has
it, whatever PYTHONDONTWRITEBYTECODE says; ``--compile-each-run`` compiles every source
on every run instead (what an environment with PYTHONDONTWRITEBYTECODE=1 does to a
source checkout; site-packages keep their own caches). Targets (issue 27): summary
views <= 2x DuckDB's time and <= 512 MiB, advise <= 1 GiB, export <= 1 GiB and flat
from 1M to 10M. Prints figures; asserts nothing. The first round's output of every
command is kept under the work dir (``out-<N>/``) to compare two versions' figures.

    .venv/bin/python bench/read_scale.py --records 1000000
    .venv/bin/python bench/read_scale.py --records 10000000 --rounds 5 --no-export
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

# The repository root, so that the bench scripts import each other as ``bench.*``.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.read_scale_sql import ANCHORS, KERNELS_GROUP_BY, anchor_code

VIEWS = ("kernels", "kernels-by-job", "streams", "gpus", "memcpy", "jobs")
EXPORTS = {
    "chrome": "out.json.gz",
    "perfetto": "out.pftrace",
    "xplane": "out.xplane.pb",
    "stepstats": "out.pb",
}
SUMMARY_RSS_MIB, ADVISE_RSS_MIB, EXPORT_RSS_MIB = 512, 1024, 1024
TIME_RATIO = 2.0


def timed(argv: list[str], env: dict[str, str], stdout: Path | None = None) -> tuple[float, float]:
    """(wall seconds, peak RSS MiB) of ``argv`` under /usr/bin/time."""
    report = Path(f"/tmp/read_scale_time.{os.getpid()}")
    with open(stdout or os.devnull, "w") as out:
        run = subprocess.run(
            ["/usr/bin/time", "-o", str(report), "-f", "%e %M", *argv],
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
            env=env,
        )
    if run.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({run.returncode}):\n{run.stderr[-3000:]}")
    seconds, kib = report.read_text().split()[-2:]
    report.unlink()
    return float(seconds), int(kib) / 1024


def cli() -> str:
    return str(Path(sys.executable).with_name("tfprof-collector"))


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--records", type=int, default=1_000_000, help="GPU records (default: 1M)")
    p.add_argument(
        "--work-dir",
        default="/work/benchdata-rp",
        help="where data dirs are built and kept (default: %(default)s)",
    )
    p.add_argument(
        "--segments",
        type=int,
        default=10,
        help="compactions over the run (default: 10, one a minute at 10M)",
    )
    p.add_argument("--rounds", type=int, default=3, help="rounds of summary/advise (default: 3)")
    p.add_argument("--export-rounds", type=int, default=1, help="rounds of export (default: 1)")
    p.add_argument("--views", default=",".join(VIEWS), help="summary views to time")
    p.add_argument("--no-advise", action="store_true", help="leave advise out")
    p.add_argument("--no-export", action="store_true", help="leave export out")
    p.add_argument("--formats", default=",".join(EXPORTS), help="export formats to time")
    p.add_argument(
        "--layout",
        choices=("today", "sorted"),
        default="today",
        help="today: segments in arrival order, as compaction wrote them before it sorted "
        "them; sorted: each segment rewritten sorted by start, as compaction writes them "
        "now (a copy of the data dir, name ending -sorted) (default: today)",
    )
    p.add_argument(
        "--compile-each-run",
        action="store_true",
        help="no bytecode cache: every run compiles the sources it imports",
    )
    p.add_argument("--json", metavar="FILE", help="also write every measurement here")
    args = p.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if args.compile_each_run:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    else:
        env["PYTHONPYCACHEPREFIX"] = str(Path(args.work_dir).resolve() / "pycache")

    data_dir = Path(args.work_dir) / f"gpu1proc-{args.records}"
    if not (data_dir / "built").exists():
        from bench.read_scale_lake import build

        shutil.rmtree(data_dir, ignore_errors=True)
        t0 = time.perf_counter()
        build(data_dir, args.records, args.segments)
        (data_dir / "built").write_text("")
        print(f"built {data_dir} in {time.perf_counter() - t0:.0f} s")
    if args.layout == "sorted":
        from bench.read_scale_lake import sort_segments

        sorted_dir = data_dir.with_name(f"{data_dir.name}-sorted")
        if not (sorted_dir / "built").exists():
            shutil.rmtree(sorted_dir, ignore_errors=True)
            shutil.copytree(data_dir, sorted_dir)
            sort_segments(sorted_dir)
        data_dir = sorted_dir
    lake = data_dir / "lake"
    files = list(lake.rglob("*.parquet"))
    size = sum(f.stat().st_size for f in files)
    outs = Path(args.work_dir) / f"out-{args.records}"  # one layout's figures are the other's
    outs.mkdir(exist_ok=True)
    import duckdb

    print(f"load average {os.getloadavg()[0]:.1f} at the start")
    print(
        f"{args.records:,} GPU records of one process, {len(files)} Parquet files, "
        f"{size / args.records:.1f} B/record; python {sys.version.split()[0]}, duckdb "
        f"{duckdb.__version__}, {os.cpu_count()} CPUs; medians of {args.rounds} "
        f"(export: {args.export_rounds}); bytecode "
        + ("compiled on every run" if args.compile_each_run else "cached")
    )
    py, d = sys.executable, str(data_dir)
    results: list[dict[str, object]] = []
    header = (
        f"{'command':24s} {'s':>7s} {'MiB':>7s} {'duckdb s':>9s} {'MiB':>6s} "
        f"{'x time':>7s} {'x MiB':>6s}  target"
    )
    print(header)

    def measure(label: str, argv: list[str], anchor: str | None, rounds: int, target: str) -> None:
        ours, theirs = [], []
        anchor_argv = None if anchor is None else [py, "-c", anchor_code(anchor, str(lake))]
        # Untimed: the bytecode cache written, the files in the page cache, for both.
        for first in (argv, anchor_argv):
            if first is not None:
                timed(first, env)
        for r in range(rounds):
            keep = outs / f"{label.replace(' ', '_')}.txt" if r == 0 else None
            ours.append(timed(argv, env, keep))
            if anchor_argv is not None:
                theirs.append(timed(anchor_argv, env))
        s = statistics.median(t for t, _ in ours)
        m = statistics.median(m for _, m in ours)
        row: dict[str, object] = {
            "command": label,
            "seconds": s,
            "rss_mib": m,
            "runs": ours,
            "target": target,
        }
        line = f"{label:24s} {s:7.2f} {m:7.0f}"
        if theirs:
            ds = statistics.median(t for t, _ in theirs)
            dm = statistics.median(m for _, m in theirs)
            row.update(duckdb_seconds=ds, duckdb_rss_mib=dm, duckdb_runs=theirs)
            line += f" {ds:9.2f} {dm:6.0f} {s / ds:7.2f} {m / dm:6.2f}"
        else:
            line += f" {'-':>9s} {'-':>6s} {'-':>7s} {'-':>6s}"
        print(f"{line}  {target}", flush=True)
        results.append(row)

    summary_target = f"<= {TIME_RATIO:g}x, <= {SUMMARY_RSS_MIB} MiB"
    for view in [v for v in args.views.split(",") if v]:
        measure(
            f"summary {view}",
            [cli(), "summary", "--data-dir", d, "--view", view],
            ANCHORS[view],
            args.rounds,
            summary_target,
        )
    if "kernels" in args.views.split(","):
        measure(
            "duckdb GROUP BY only",
            [py, "-c", anchor_code(KERNELS_GROUP_BY, str(lake))],
            None,
            args.rounds,
            "(issue 27's kernels anchor)",
        )
    if not args.no_advise:
        measure(
            "advise",
            [cli(), "advise", "--data-dir", d],
            None,
            args.rounds,
            f"<= {ADVISE_RSS_MIB} MiB",
        )
    if not args.no_export:
        target_dir = Path(args.work_dir) / "exports"
        target_dir.mkdir(exist_ok=True)
        export_target = f"<= {EXPORT_RSS_MIB} MiB, flat"
        for fmt in [f for f in args.formats.split(",") if f]:
            out = target_dir / EXPORTS[fmt]
            runs = [("export", [cli(), "export", "--data-dir", d, "-o", str(out)])]
            for label, argv in runs:
                measure(f"{label} {fmt}", argv, None, args.export_rounds, export_target)
                if out.is_dir():
                    shutil.rmtree(out)
                else:
                    out.unlink(missing_ok=True)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    if args.json:
        Path(args.json).write_text(
            json.dumps({"records": args.records, "results": results}, indent=1)
        )


if __name__ == "__main__":
    main()
