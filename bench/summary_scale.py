"""Seconds and peak RSS of ``summary --view kernels``, ``advise`` and ``export`` (each
format) over N stored records, next to issue 11's targets.

The records are a real trace's, repeated back to back as ``--replay-repeat`` does (each
loop shifted past the previous one plus a 1 ms gap), split over ``--processes`` traced
processes (one GPU each). They are stored the way a collector stores them: appended as
batches through the store's ``StreamWriter`` into a data dir, then compacted into the
data dir's Parquet lake (``tfprof-collector compact``). The data dir is kept under
``--work-dir`` and reused by later runs with the same sizes.

Each command then runs as the CLI runs it (``tfprof-collector ...``), in a fresh
subprocess, so each peak RSS (VmHWM, children excluded) is its own. ``seconds`` is the
whole command, from starting the interpreter to its exit (what a user waits for, imports
included); ``in main`` the CLI's ``main()`` alone (startup, the CLI's imports and exit
left out). Prints figures; asserts nothing.

    .venv/bin/python bench/summary_scale.py --records 10000000
    .venv/bin/python bench/summary_scale.py --records 100000000 --no-export
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tfprof.core.version import PROTOCOL_VERSION

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = REPO.parent / "shared" / "data" / "traces" / "kineto-hta" / "simple_add.json.gz"
LOOP_GAP_NS = 1_000_000
SHIFT_NS = 1_700_000_000_000_000_000
BATCH_RECORDS = 1 << 16
# Issue 11: summary and advise at 10M <= 1 GiB and <= 2 s, at 100M <= 2 GiB; export at
# 10M <= 1 GiB in every format.
TARGET_RSS_MIB = {10_000_000: 1024, 100_000_000: 2048}
TARGET_SECONDS = {10_000_000: 2.0}
EXPORTS = {"chrome": "out.json.gz", "perfetto": "out.pftrace", "xplane": "out.xplane.pb",
           "stepstats": "out.pb"}  # fmt: skip


def store_records(data_dir: Path, trace_path: Path, records: int, processes: int) -> None:
    """Write ``records`` tiled records as ``processes`` streams, then compact them."""
    import numpy as np  # not at the top: a child's numpy is the CLI's to import

    from tfprof.collector.jobdata import RECORD_COLUMNS
    from tfprof.collector.lake.location import lake_of
    from tfprof.collector.lake.publish import compact_data_dir
    from tfprof.collector.lake.segments import collector_id
    from tfprof.collector.store import Store
    from tfprof.proto import collector_pb2 as pb
    from tfprof.readers import load_trace

    trace = load_trace(trace_path)
    base = {c: np.frombuffer(trace.columns[c], dtype=np.int64) for c in RECORD_COLUMNS}
    n = len(trace)
    period = trace.span_ns + LOOP_GAP_NS
    # Each loop's correlation ids follow the previous loop's: unique per process, and
    # inside CUPTI's uint32 even at 25M records per process.
    correlations = int(base["correlation"].max()) + 1
    per_process = records // processes
    store = Store(data_dir, fsync=False)
    for p in range(processes):
        hello = pb.Hello(protocol_version=PROTOCOL_VERSION, stream_secret=b"s" * 32,
                         job="bench", run_id="r1", host="h", pid=100 + p,
                         task=str(p), stream_id=f"s{p}", clock_offset_ns=SHIFT_NS,
                         devices=[pb.Device(ordinal=0, uuid=f"GPU-bench-{p}")])  # fmt: skip
        writer = store.open_stream(hello)
        for seq, first in enumerate(range(0, per_process, BATCH_RECORDS), start=1):
            rows = np.arange(first, min(first + BATCH_RECORDS, per_process), dtype=np.int64)
            loop, index = rows // n, rows % n
            batch = pb.Batch(seq=seq)
            if seq == 1:
                batch.string_base = 1
                batch.strings.extend(trace.names[1:])
            for c in RECORD_COLUMNS:
                values = base[c][index]
                if c == "start_ns":
                    values = values + loop * period
                elif c == "correlation":
                    values = np.where(values > 0, values + loop * correlations, 0)
                if values.any():  # an empty column stands for all zeros
                    getattr(batch.records, c).extend(values.tolist())
            writer.append(batch)
        writer.finish(pb.Goodbye(records_sent=per_process))
        writer.close()
    _done, failed = compact_data_dir(data_dir, lake_of(data_dir), collector_id(data_dir))
    if failed:
        raise SystemExit(f"compaction failed: {failed}")


def recompact(data_dir: Path) -> None:
    """Compact a reused data dir again: nothing to do when this release compacted it,
    else its watermarks are brought up to date (one written before the lake kept the
    log's state makes every reader read the whole log again: 25 s at 100M)."""
    from tfprof.collector.lake.location import lake_of
    from tfprof.collector.lake.publish import compact_data_dir
    from tfprof.collector.lake.segments import collector_id

    _done, failed = compact_data_dir(data_dir, lake_of(data_dir), collector_id(data_dir))
    if failed:
        raise SystemExit(f"compaction failed: {failed}")


def peak_rss_mib() -> float:
    """This process image's peak RSS: VmHWM starts afresh at exec, where getrusage's
    ru_maxrss keeps the peak of the process that forked it."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def child(argv: list[str]) -> None:
    from tfprof.collector.cli import main
    from tfprof.collector.config import import_numpy_without_blas_threads

    # What main() imports first (numpy, as it does; then every command's module): ``in
    # main`` leaves the CLI's imports out, as the whole command's seconds do not.
    import_numpy_without_blas_threads()
    import tfprof.collector.commands  # noqa: F401

    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()) as out:
        code = main(argv)
    print(json.dumps({"code": code, "seconds": round(time.perf_counter() - t0, 2),
                      "peak_rss_mib": round(peak_rss_mib()),
                      "output_lines": out.getvalue().count("\n")}))  # fmt: skip


def measure(argv: list[str]) -> dict[str, float]:
    t0 = time.perf_counter()
    run = subprocess.run([sys.executable, __file__, "--child", json.dumps(argv)],
                         capture_output=True, text=True, check=False)  # fmt: skip
    seconds = time.perf_counter() - t0
    if run.returncode != 0 or not run.stdout.strip():
        raise SystemExit(f"{' '.join(argv)} failed:\n{run.stderr[-2000:]}")
    result: dict[str, float] = json.loads(run.stdout.strip().splitlines()[-1])
    result["command_seconds"] = seconds
    return result


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--records", type=int, default=10_000_000, help="(default: 10,000,000)")
    p.add_argument("--processes", type=int, default=4,
                   help="traced processes (streams), one GPU each (default: 4)")  # fmt: skip
    p.add_argument("--trace", default=str(DEFAULT_TRACE), help="real trace to repeat")
    p.add_argument("--work-dir", default="/tmp/tfprof-summary-scale",
                   help="where the data dir is built and kept (default: %(default)s)")  # fmt: skip
    p.add_argument("--no-export", action="store_true", help="time summary and advise only")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(json.loads(args.child))
        return
    data_dir = Path(args.work_dir) / f"{args.records}x{args.processes}"
    if not (data_dir / "built").exists():
        shutil.rmtree(data_dir, ignore_errors=True)
        t0 = time.perf_counter()
        store_records(data_dir, Path(args.trace), args.records, args.processes)
        (data_dir / "built").write_text("")
        print(f"stored and compacted in {time.perf_counter() - t0:.0f} s")
    else:
        recompact(data_dir)
    lake_bytes = sum(f.stat().st_size for f in (data_dir / "lake").rglob("*.parquet"))
    print(f"{args.records:,} records of {Path(args.trace).name} in {args.processes} processes, "
          f"{lake_bytes / args.records:.1f} B/record in Parquet (python "
          f"{sys.version.split()[0]}, {os.cpu_count()} CPUs)")  # fmt: skip
    rss_target = TARGET_RSS_MIB.get(args.records)
    s_target = TARGET_SECONDS.get(args.records)
    print(f"{'command':34s} {'seconds':>8s} {'target':>7s} {'in main':>8s} "
          f"{'peak RSS MiB':>13s} {'target':>7s}")  # fmt: skip

    def show(label: str, argv: list[str], timed: bool) -> None:
        r = measure(argv)
        t = f"{s_target:.0f}" if (timed and s_target) else "-"
        m = f"{rss_target:,}" if rss_target else "-"
        print(f"{label:34s} {r['command_seconds']:8.2f} {t:>7s} {r['seconds']:8.2f} "
              f"{r['peak_rss_mib']:13,.0f} {m:>7s}")  # fmt: skip

    d = str(data_dir)
    show("summary --view kernels", ["summary", "--data-dir", d, "--view", "kernels",
                                    "--top", "20"], timed=True)  # fmt: skip
    show("advise", ["advise", "--data-dir", d], timed=True)
    if not args.no_export:
        out = Path(args.work_dir) / "exports"
        out.mkdir(exist_ok=True)
        for fmt, name in EXPORTS.items():
            show(f"export --format {fmt}", ["export", "--data-dir", d, "-o", str(out / name)],
                 timed=False)  # fmt: skip
            with contextlib.suppress(FileNotFoundError):
                (out / name).unlink()


if __name__ == "__main__":
    main()
