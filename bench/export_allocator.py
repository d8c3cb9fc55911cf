"""Peak RSS and seconds of ``tfprof-collector export`` with the allocator settings of
collector/allocator.py and without them, over a data dir or lake.

The export loads each traced process whole (the only reader that does) and sets
glibc's mmap threshold for it (``map_large_allocations``, in ``timeline_parts``) and
gives freed memory back after each process (``return_freed_memory``, when a
``LakeStream`` is released). Modes: ``on`` (as shipped), ``mmap`` (the threshold
only), ``trim`` (the returns only), ``off`` (neither: the allocators as they come).
Each run is its own process (``-c``, the setting replaced by a no-op before the
export starts), modes alternating, ``--rounds`` times; peak RSS from ``getrusage``.
Prints figures; asserts nothing.

    .venv/bin/python bench/export_allocator.py /tmp/tfprof-dist-scale/ranks-64x62500
    .venv/bin/python bench/export_allocator.py DATA_DIR --rounds 3 --modes on,off
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

MODES = ("on", "mmap", "trim", "off")
CHILD = """\
import resource, sys, time
import tfprof.collector.lake.lake_stream as lake_stream
import tfprof.collector.timeline.build as build
mode, data_dir, out = sys.argv[1:4]
if mode in ("trim", "off"):
    build.map_large_allocations = lambda: None
if mode in ("mmap", "off"):
    lake_stream.return_freed_memory = lambda: None
from tfprof.collector.cli import main
t0 = time.perf_counter()
main(["export", "--data-dir", data_dir, "-o", out])
seconds = time.perf_counter() - t0
print(seconds, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("data_dir", help="a data dir, lake directory or URL to export")
    p.add_argument("--rounds", type=int, default=2, help="runs per mode (default: 2)")
    p.add_argument("--modes", default=",".join(MODES), help=f"of {', '.join(MODES)}")
    p.add_argument("--output", default="trace.pftrace",
                   help="the output's name; its suffix picks the format (default: "
                   "trace.pftrace), written in a temporary directory")  # fmt: skip
    args = p.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if bad := [m for m in modes if m not in MODES]:
        p.error(f"unknown mode(s) {bad}: choose from {', '.join(MODES)}")
    found: dict[str, list[tuple[float, float]]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(prefix="tfprof-alloc-") as tmp:
        out = str(Path(tmp) / args.output)
        for _ in range(args.rounds):
            for mode in modes:
                done = subprocess.run(
                    [sys.executable, "-c", CHILD, mode, args.data_dir, out],
                    capture_output=True, text=True, check=True,
                )  # fmt: skip
                seconds, kb = done.stdout.split()[-2:]
                found[mode].append((float(seconds), int(kb) / 1024))
    print(f"export {args.data_dir} -o {args.output}: medians of {args.rounds}")
    print(f"{'mode':6} {'s':>8} {'MiB':>8}")
    for mode, runs in found.items():
        s = statistics.median(r[0] for r in runs)
        mib = statistics.median(r[1] for r in runs)
        print(f"{mode:6} {s:8.1f} {mib:8,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
