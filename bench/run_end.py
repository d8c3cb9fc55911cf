"""Seconds and peak RSS of the end of ``tfprof-agent run`` with the embedded collector:
the trace written from the run's data dir and the summary printed after it
(``EmbeddedCollector.write_trace``), over N GPU records of ONE traced process.

The data dir holds what the embedded collector leaves when the job ends: the stream's
log, never compacted (``read_scale_lake.py`` with no compaction: one rank, two GPUs,
eight streams, kernels, copies, memsets and syncs). It is built once per size under
``--work-dir`` and reused. Each round runs the end of run in its own process under
``/usr/bin/time -f '%e %M'`` (interpreter start and imports included), with the code
on ``PYTHONPATH`` (or the installed one): run it from two checkouts to compare them.
Prints figures; asserts nothing.

    .venv/bin/python bench/run_end.py --records 1000000
    PYTHONPATH=... .venv/bin/python bench/run_end.py --records 10000000 --output x.pftrace
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

END_OF_RUN = (
    "import sys\n"
    "from tfprof.collector.embedded import EmbeddedCollector\n"
    "text = EmbeddedCollector(sys.argv[1]).write_trace(sys.argv[2])\n"
    "print(text.splitlines()[0], file=sys.stderr)\n"
)


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--records", type=int, default=1_000_000, help="GPU records (default: 1M)")
    p.add_argument("--work-dir", default="/work/benchdata-rp", help="where data dirs are kept")
    p.add_argument("--output", default="trace.pftrace",
                   help="the trace's file name (its suffix picks the format; default: "
                   "trace.pftrace), written in a temporary directory")  # fmt: skip
    p.add_argument("--rounds", type=int, default=1, help="rounds (default: 1)")
    args = p.parse_args()

    data_dir = Path(args.work_dir) / f"run-end-{args.records}"
    if not (data_dir / "built").exists():
        from bench.read_scale_lake import build

        t0 = time.perf_counter()
        build(data_dir, args.records, 0)  # no compaction: the embedded store's logs
        (data_dir / "built").write_text("")
        print(f"built {data_dir} in {time.perf_counter() - t0:.0f} s")
    seconds, mib = [], []
    with tempfile.TemporaryDirectory(prefix="tfprof-run-end-") as tmp:
        out = Path(tmp) / args.output
        for _ in range(args.rounds):
            done = subprocess.run(
                ["/usr/bin/time", "-f", "%e %M", sys.executable, "-c", END_OF_RUN,
                 str(data_dir), str(out)],
                capture_output=True, text=True, check=True, env=dict(os.environ),
            )  # fmt: skip
            lines = done.stderr.strip().splitlines()
            wall, kb = lines[-1].split()
            seconds.append(float(wall))
            mib.append(int(kb) / 1024)
            summary = next(line for line in lines if line.startswith("tfprof: job"))
        size = out.stat().st_size
    print(f"{args.records:,} GPU records of one process, {args.output}, {size / 1e6:,.0f} MB")
    print(summary)
    print(f"end of run: {statistics.median(seconds):.2f} s, "
          f"{statistics.median(mib):,.0f} MiB peak RSS (median of {args.rounds})")  # fmt: skip


if __name__ == "__main__":
    main()
