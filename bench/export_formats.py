"""File size, write time and peak memory of each export format for one large timeline.

Prints figures, asserts nothing. The timeline is ``export_vs_tf_timeline.make_job``'s
(one process, two GPUs, four streams each, ~80% kernels with a few hundred names, 18%
copies, 2% memsets) plus host samples every 500 ms. Each format is measured in a fresh
child process, so its peak RSS is its own: ``base`` is the child's peak after building
the timeline, ``peak`` after writing it, ``write`` is what writing added on top.

    .venv/bin/python bench/export_formats.py --records 1000000
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

# The repository root, so that the bench scripts import each other as ``bench.*``.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

FORMATS = {"chrome": "trace.json.gz", "perfetto": "trace.pftrace", "xplane": "logdir/"}


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def child(fmt: str, records: int, out_dir: str) -> dict[str, float | int | str]:
    from bench.export_vs_tf_timeline import make_job
    from tfprof.collector.export import write_timeline
    from tfprof.collector.merge import build_timeline

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
    started = time.perf_counter()
    target = write_timeline(timeline, os.path.join(out_dir, FORMATS[fmt]), fmt)
    seconds = time.perf_counter() - started
    peak = _peak_mib()
    return {
        "format": fmt,
        "file": target.name,
        "records": records,
        "slices": timeline.num_slices,
        "bytes": target.stat().st_size,
        "write_s": round(seconds, 2),
        "base_rss_mib": round(base),
        "peak_rss_mib": round(peak),
        "write_rss_mib": round(peak - base),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.records, args.out)))
        return
    print(f"{args.records:,} records; each format in its own process")
    header = f"{'format':<9} {'file':<22} {'slices':>10} {'MB':>8} {'write s':>8} "
    print(header + f"{'base MiB':>9} {'peak MiB':>9} {'write MiB':>10}")
    for fmt in args.formats.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [sys.executable, __file__, "--child", fmt, "--records", str(args.records)]
            result = subprocess.run(
                [*cmd, "--out", tmp], capture_output=True, text=True, check=False
            )
            if result.returncode:
                print(f"{fmt:<9} failed: {result.stderr.strip().splitlines()[-1:]}")
                continue
            r = json.loads(result.stdout.strip().splitlines()[-1])
            print(
                f"{r['format']:<9} {r['file']:<22} {r['slices']:>10,} {r['bytes'] / 1e6:>8.1f} "
                f"{r['write_s']:>8.2f} {r['base_rss_mib']:>9} {r['peak_rss_mib']:>9} "
                f"{r['write_rss_mib']:>10}"
            )


if __name__ == "__main__":
    main()
