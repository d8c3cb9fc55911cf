"""Seconds and peak RSS of ``summary --view kernels`` and ``advise`` over N records.

Builds the records as ``--replay-repeat`` does: a real trace's records repeated back to
back, each loop shifted past the previous one (plus a 1 ms gap), into one stored-job
``JobData`` per process, then runs the analysis in a fresh subprocess per command so
each peak RSS is its own. Prints figures; asserts nothing.

    .venv/bin/python bench/summary_scale.py --records 10000000
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from tfprof.collector.model import JobData

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = REPO.parent / "shared" / "data" / "traces" / "kineto-hta" / "simple_add.json.gz"
LOOP_GAP_NS = 1_000_000


def build_jobs(trace_path: Path, records: int, processes: int) -> list[JobData]:
    from tfprof.collector.model import RECORD_COLUMNS, DeviceMeta, JobData, StreamData
    from tfprof.core.formats import load_trace

    trace = load_trace(trace_path)
    base = {c: np.frombuffer(trace.columns[c], dtype=np.int64) for c in RECORD_COLUMNS}
    n = len(trace)
    period = trace.span_ns + LOOP_GAP_NS
    per_process = records // processes
    loops = -(-per_process // n)
    streams = []
    for p in range(processes):
        cols: dict[str, np.ndarray] = {}
        for c in RECORD_COLUMNS:
            tiled = np.tile(base[c], loops)[:per_process]
            if c == "start_ns":
                tiled = (
                    tiled + np.repeat(np.arange(loops, dtype=np.int64) * period, n)[:per_process]
                )
            elif c == "correlation":
                tiled = (
                    tiled + np.repeat(np.arange(loops, dtype=np.int64) * 1_000_000, n)[:per_process]
                )
            cols[c] = np.ascontiguousarray(tiled)
        streams.append(
            StreamData(
                job="bench", run_id="r1", host="h", pid=100 + p, task=str(p),
                record_shift_ns=1_700_000_000_000_000_000, strings=list(trace.names),
                records=cols, devices={0: DeviceMeta(ordinal=0, uuid=f"GPU-bench-{p}")},
            )
        )  # fmt: skip
    return [JobData(name="bench", run_id="r1", streams=streams)]


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def child(args: argparse.Namespace) -> None:
    from tfprof.collector.advice import advise
    from tfprof.collector.advice.render import TextReporter
    from tfprof.collector.analysis import Filters, prepare, view_report
    from tfprof.collector.analysis.render import TableReporter

    t0 = time.perf_counter()
    jobs = build_jobs(Path(args.trace), args.records, args.processes)
    built_s = time.perf_counter() - t0
    rss_built = peak_rss_mib()
    t1 = time.perf_counter()
    rs = prepare(jobs)
    out = io.StringIO()
    if args.child == "kernels":
        TableReporter(view_report("kernels", rs, Filters(top=20)), colour=False).render(out)
    else:
        TextReporter(advise(rs), colour=False).render(out)
    seconds = time.perf_counter() - t1
    print(json.dumps({
        "command": args.child, "records": sum(j.num_records for j in jobs),
        "build_s": round(built_s, 2), "seconds": round(seconds, 2),
        "peak_rss_mib_after_build": round(rss_built), "peak_rss_mib": round(peak_rss_mib()),
        "output_lines": out.getvalue().count("\n"),
    }))  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--records", type=int, default=10_000_000)
    p.add_argument(
        "--processes", type=int, default=4, help="traced processes (streams), one GPU each"
    )
    p.add_argument(
        "--trace", default=str(DEFAULT_TRACE), help="real trace whose records are repeated"
    )
    p.add_argument("--child", choices=("kernels", "advise"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args)
        return
    print(f"{args.records:,} records from {args.trace} in {args.processes} processes "
          f"(python {sys.version.split()[0]}, numpy {np.__version__}, "
          f"{os.cpu_count()} CPUs)")  # fmt: skip
    for command in ("kernels", "advise"):
        run = subprocess.run(
            [sys.executable, __file__, "--child", command, "--records", str(args.records),
             "--processes", str(args.processes), "--trace", args.trace],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        r = json.loads(run.stdout.strip().splitlines()[-1])
        label = "summary --view kernels" if command == "kernels" else "advise"
        print(f"{label:24s} {r['seconds']:7.2f} s   peak RSS {r['peak_rss_mib']:,} MiB "
              f"(records alone {r['peak_rss_mib_after_build']:,} MiB; "
              f"building them took {r['build_s']} s)")  # fmt: skip


if __name__ == "__main__":
    main()
