"""File size, write time and peak memory of each export format for one large timeline.

Prints figures, asserts nothing. The timeline is ``export_vs_tf_timeline.make_job``'s
(one process, two GPUs, four streams each, ~80% kernels with a few hundred names, 18%
copies, 2% memsets) plus host samples every 500 ms. Each format is measured in a fresh
child process, so its peak RSS is its own: ``base`` is the child's peak after building
the timeline, ``peak`` after writing it, ``write`` is what writing added on top.
``write s`` is wall time, ``cpu s`` the process's CPU time over the same span (every
thread: the writers finish and compress blocks on two more), each format's module
imported before the clock starts; ``MB/1M`` is the file's size per
million records. ``chrome`` is the default ``.json.gz``, ``chrome-json`` plain ``.json``.

    .venv/bin/python bench/export_formats.py --records 1000000
    .venv/bin/python bench/export_formats.py --records 1000000 --dir /dev/shm  # no disk
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
from typing import Any

import numpy as np

# The repository root, so that the bench scripts import each other as ``bench.*``.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# name: (format, output name)
FORMATS = {
    "chrome": ("chrome", "trace.json.gz"),
    "chrome-json": ("chrome", "trace.json"),
    "perfetto": ("perfetto", "trace.pftrace"),
    "xplane": ("xplane", "logdir/"),
}


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def child(name: str, records: int, out_dir: str) -> dict[str, float | int | str]:
    from bench.export_vs_tf_timeline import make_job
    from tfprof.collector.export import reporter_for, write_timeline
    from tfprof.collector.merged.whole import build_timeline

    job = make_job(records)
    stream = job.streams[0]
    first = int(stream.records["start_ns"].min())
    last = int((stream.records["start_ns"] + stream.records["duration_ns"]).max())
    times = np.arange(first, last, 500_000_000, dtype=np.int64)
    stream.host_samples = {
        "time_ns": times,
        "cpu_percent": np.full(times.shape[0], 97.5),
        **{c: np.full(times.shape[0], 1 << 20, dtype=np.int64)
           for c in ("rss_bytes", "threads", "read_bytes", "write_bytes")},
    }  # fmt: skip
    timeline = build_timeline([job])
    base = _peak_mib()
    fmt, file_name = FORMATS[name]
    # The format's module is imported before the clock starts: once per process, however
    # large the trace (Perfetto's generated protobuf classes take ~40 ms to import).
    reporter_for(file_name, fmt)(timeline)
    started, cpu = time.perf_counter(), time.process_time()
    target = write_timeline(timeline, os.path.join(out_dir, file_name), fmt)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    peak = _peak_mib()
    return {
        "format": name,
        "file": target.name,
        "records": records,
        "slices": timeline.num_slices,
        "bytes": target.stat().st_size,
        "write_s": round(seconds, 3),
        "cpu_s": round(cpu, 3),
        "base_rss_mib": round(base),
        "peak_rss_mib": round(peak),
        "write_rss_mib": round(peak - base),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="records in the job")
    parser.add_argument(
        "--formats", default=",".join(FORMATS), help=f"comma-separated, of {', '.join(FORMATS)}"
    )
    parser.add_argument(
        "--dir", default=None, help="where the files are written (default: the temp dir)"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="measure the formats this many times, in turn (the machine's speed drifts: "
        "formats compared within a round compare fairly)",
    )
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.records, args.out)))
        return
    print(f"{args.records:,} records; each format in its own process; files in "
          f"{args.dir or tempfile.gettempdir()}")  # fmt: skip
    header = f"{'format':<12} {'file':<16} {'slices':>10} {'MB':>8} {'MB/1M':>7} {'write s':>8} "
    print(header + f"{'cpu s':>6} {'base MiB':>9} {'peak MiB':>9} {'write MiB':>10}")
    formats = args.formats.split(",")
    seconds: list[dict[str, float]] = []
    for _ in range(max(1, args.rounds)):
        seconds.append({})
        for fmt in formats:
            r = _measure(fmt, args.records, args.dir)
            if r is not None:
                seconds[-1][fmt] = float(r["write_s"])
    if "perfetto" in formats and "chrome-json" in formats:
        ratios = [
            f"{s['perfetto'] / s['chrome-json']:.2f}"
            for s in seconds
            if s.get("chrome-json") and "perfetto" in s
        ]
        print(f"perfetto / chrome-json write time, each round: {', '.join(ratios)}")


def _measure(fmt: str, records: int, out_dir: str | None) -> dict[str, Any] | None:
    """One format written by a child process: its figures, printed as a row."""
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
        cmd = [sys.executable, __file__, "--child", fmt, "--records", str(records)]
        result = subprocess.run([*cmd, "--out", tmp], capture_output=True, text=True, check=False)
    if result.returncode:
        print(f"{fmt:<12} failed: {result.stderr.strip().splitlines()[-1:]}")
        return None
    r: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    per_million = r["bytes"] / 1e6 / (r["records"] / 1e6)
    print(
        f"{r['format']:<12} {r['file']:<16} {r['slices']:>10,} {r['bytes'] / 1e6:>8.1f} "
        f"{per_million:>7.1f} {r['write_s']:>8.2f} {r['cpu_s']:>6.2f} "
        f"{r['base_rss_mib']:>9} {r['peak_rss_mib']:>9} {r['write_rss_mib']:>10}"
    )
    return r


if __name__ == "__main__":
    main()
