"""Chrome and Perfetto export of a real Kineto trace with its host side, tiled to N records.

Prints figures and asserts nothing. The trace is the shipped PyTorch Kineto trace
(tests/data/traces/kineto-hta/simple_add.json.gz by default). It holds runtime API calls,
cpu_op and user_annotation ranges, kernels, copies, memsets and syncs, with launch flows.
Its records are repeated back to back until the job holds ``--records``. Each copy is
shifted past the previous one in time, and its correlation and external ids are shifted
past the previous copy's, so every copy links like the original. Each format is written
by a child process of its own, as in bench/export_formats.py. ``build s`` is
``build_timeline`` (flows, attribution and lanes included). ``write s`` is wall time and
``cpu s`` the process's CPU time over the write (both threads). ``MB/1M`` is the file's
size per million records.

    .venv/bin/python bench/export_host_side.py --records 1000000 --dir /dev/shm
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from tfprof.collector.jobdata import JobData
from tfprof.collector.store.importer import jobs_from_files

REPO = Path(__file__).resolve().parent.parent
TRACE = REPO / "tests" / "data" / "traces" / "kineto-hta" / "simple_add.json.gz"
# name: (format, output name)
FORMATS = {
    "chrome": ("chrome", "trace.json.gz"),
    "chrome-json": ("chrome", "trace.json"),
    "perfetto": ("perfetto", "trace.pftrace"),
}
GAP_NS = 1_000_000  # between one copy of the trace and the next


def tiled_job(path: Path, records: int) -> JobData:
    """The trace's records repeated to ``records`` (at least one copy) as one job."""
    (job,) = jobs_from_files([path], as_steps=False)
    (stream,) = job.streams
    base = stream.records
    n = int(base["kind"].shape[0])
    copies = max(1, records // n)
    end = base["start_ns"] + base["duration_ns"]
    span = int(end.max() - base["start_ns"].min()) + GAP_NS
    step = np.repeat(np.arange(copies, dtype=np.int64), n)
    cols = {c: np.tile(v, copies) for c, v in base.items()}
    cols["start_ns"] += step * span
    for c in ("correlation", "external_id"):
        shift = step * (int(base[c].max()) + 1)
        cols[c] = np.where(cols[c] != 0, cols[c] + shift, 0)
    stream.records = cols
    return JobData(name=job.name, run_id=job.run_id, streams=[stream])


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def child(name: str, records: int, trace: str, out_dir: str) -> dict[str, float | int | str]:
    from tfprof.collector.export import write_timeline
    from tfprof.collector.merged.whole import build_timeline

    job = tiled_job(Path(trace), records)
    started = time.perf_counter()
    timeline = build_timeline([job])
    build = time.perf_counter() - started
    fmt, file_name = FORMATS[name]
    started, cpu = time.perf_counter(), time.process_time()
    target = write_timeline(timeline, os.path.join(out_dir, file_name), fmt)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    return {
        "format": name,
        "records": int(job.streams[0].records["kind"].shape[0]),
        "slices": timeline.num_slices,
        "flows": len(timeline.flows),
        "bytes": target.stat().st_size,
        "build_s": round(build, 2),
        "write_s": round(seconds, 2),
        "cpu_s": round(cpu, 2),
        "peak_rss_mib": round(_peak_mib()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="example: bench/export_host_side.py --records 1000000 --dir /dev/shm",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--records", type=int, default=1_000_000, help="records in the job")
    parser.add_argument("--trace", default=str(TRACE), help="the Kineto trace to tile")
    parser.add_argument(
        "--formats", default=",".join(FORMATS), help=f"comma-separated, of {', '.join(FORMATS)}"
    )
    parser.add_argument(
        "--dir", default=None, help="where the files are written (the temp dir when not given)"
    )
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.records, args.trace, args.out)))
        return
    print(f"{Path(args.trace).name} tiled to ~{args.records:,} records; each format in its "
          f"own process; files in {args.dir or tempfile.gettempdir()}")  # fmt: skip
    print(f"{'format':<12} {'records':>9} {'slices':>9} {'flows':>8} {'MB':>7} {'MB/1M':>6} "
          f"{'build s':>8} {'write s':>8} {'cpu s':>6} {'peak MiB':>9}")  # fmt: skip
    for fmt in args.formats.split(","):
        with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
            cmd = [sys.executable, __file__, "--child", fmt, "--records", str(args.records)]
            result = subprocess.run(
                [*cmd, "--trace", args.trace, "--out", tmp],
                capture_output=True,
                text=True,
                check=False,
            )
            if result.returncode:
                print(f"{fmt:<12} failed: {result.stderr.strip().splitlines()[-1:]}")
                continue
            r = json.loads(result.stdout.strip().splitlines()[-1])
            per_million = r["bytes"] / 1e6 / (r["records"] / 1e6)
            print(
                f"{r['format']:<12} {r['records']:>9,} {r['slices']:>9,} {r['flows']:>8,} "
                f"{r['bytes'] / 1e6:>7.1f} {per_million:>6.1f} {r['build_s']:>8.2f} "
                f"{r['write_s']:>8.2f} {r['cpu_s']:>6.2f} {r['peak_rss_mib']:>9}"
            )


if __name__ == "__main__":
    main()
