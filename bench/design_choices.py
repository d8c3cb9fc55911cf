"""The small measurements behind choices the code makes, one section per choice.

Prints figures, asserts nothing. Each section names the code it backs; the comment there
points at bench/results/cpu-design-choices.txt instead of quoting a figure.

- ``imports``: what an import costs a fresh interpreter, median of ``--runs`` processes
  (dataclasses and hashlib: why the in-process modules avoid them at start-up; numpy:
  why the replay source imports it on first use; pyarrow.compute: why the lake reader
  imports it where used; ``to_numpy``: why lake/arrays.py converts Arrow columns itself,
  since pyarrow's ``to_numpy`` imports pandas where pandas is installed).
- ``blas``: the CPU a process spends when numpy starts OpenBLAS with a thread per core
  against one thread (collector/config.py's ``import_numpy_without_blas_threads``).
- ``gzip``: speed and size of the Chrome JSON at each deflate level, over a real export
  (export/__init__.py's ``GZIP_LEVEL``).
- ``gather``: ``np.take`` against fancy indexing, for a column and for the rows of a
  byte table (export/args.py's ``pick``, export/chrome_rows.py's row take).
- ``sort``: stable argsort of a small key (under 2**16) against a 64-bit key
  (timeline/track_rows.py's ``_groups``: a chunk's rows by track).
- ``mask``: a flat boolean mask with dropped bytes in runs against ``np.compress``
  (export/protowire.py's ``encoded_rows``).
- ``fdatasync``: an append plus fdatasync per batch size, in ``--dir``
  (store/writer.py: the collector acknowledges a batch only once it is durable).

    .venv/bin/python bench/design_choices.py
    .venv/bin/python bench/design_choices.py --only gzip,fdatasync --dir /var/lib/tfprof
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SECTIONS = ("imports", "blas", "gzip", "gather", "sort", "mask", "fdatasync")
# The Chrome export compressed by the gzip section: a real trace merged by our exporter.
GZIP_SOURCE = REPO / "tests" / "data" / "traces" / "kineto-hta" / "simple_add.json.gz"

# (label, setup run before the clock starts, statement timed), each in a fresh process.
IMPORTS = (
    ("import dataclasses", "", "import dataclasses"),
    ("import hashlib", "", "import hashlib"),
    ("import numpy (1 BLAS thread)", "", "import numpy"),
    ("import pyarrow.compute (after pyarrow)", "import pyarrow", "import pyarrow.compute"),
    ("import pandas (after pyarrow)", "import pyarrow", "import pandas"),
)
# Whether pyarrow's Array.to_numpy imports pandas (an array made without pandas' help).
_TO_NUMPY_PROBE = """
import sys, pyarrow as pa
a = pa.Array.from_buffers(pa.int64(), 3, [None, pa.py_buffer(bytes(24))])
before = "pandas" in sys.modules
a.to_numpy()
print(before, "pandas" in sys.modules)
"""
_TIMED = """
import sys, time
{setup}
t0 = time.perf_counter()
{statement}
print(time.perf_counter() - t0, "pandas" in sys.modules)
"""


def best_of(fn: Callable[[], object], runs: int) -> float:
    """Median seconds of ``runs`` calls of ``fn`` after one warm-up call."""
    fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def section_imports(args: argparse.Namespace) -> None:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    print(f"imports (fresh interpreter each, median of {args.runs}):")
    for label, setup, statement in IMPORTS:
        code = _TIMED.format(setup=setup, statement=statement)
        seconds, pandas = [], False
        for _ in range(args.runs):
            out = subprocess.run(
                [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
            ).stdout.split()
            seconds.append(float(out[0]))
            pandas = pandas or out[1] == "True"
        note = "  (imported pandas)" if pandas else ""
        print(f"  {label:<38} {statistics.median(seconds) * 1e3:8.1f} ms{note}")
    before, after = subprocess.run(
        [sys.executable, "-c", _TO_NUMPY_PROBE], capture_output=True, text=True, check=True
    ).stdout.split()
    imports = before == "False" and after == "True"
    print(f"  pyarrow Array.to_numpy imports pandas: {'yes' if imports else 'no'}")


_BLAS_CHILD = "import numpy, time; time.sleep(1.0)"


def section_blas(args: argparse.Namespace) -> None:
    print(f"blas: CPU of `import numpy` + 1 s asleep, median of {args.runs} processes:")
    for label, threads in (("OpenBLAS default threads", None), ("OPENBLAS_NUM_THREADS=1", "1")):
        env = dict(os.environ)
        env.pop("OPENBLAS_NUM_THREADS", None)
        if threads:
            env["OPENBLAS_NUM_THREADS"] = threads
        cpu = []
        for _ in range(args.runs):
            proc = subprocess.Popen([sys.executable, "-c", _BLAS_CHILD], env=env)
            _, _, usage = os.wait4(proc.pid, 0)
            proc.returncode = 0  # reaped here, not by Popen
            cpu.append(usage.ru_utime + usage.ru_stime)
        print(f"  {label:<38} {statistics.median(cpu):8.3f} s CPU")


def _chrome_json(tmp: Path) -> bytes:
    """Our Chrome export of the shipped Kineto trace, uncompressed."""
    from tfprof.collector.cli import main

    out = tmp / "export.json"
    with open(os.devnull, "w") as quiet:
        saved, sys.stderr = sys.stderr, quiet
        try:
            main(["export", str(GZIP_SOURCE), "-o", str(out)])
        finally:
            sys.stderr = saved
    return out.read_bytes()


def section_gzip(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        data = _chrome_json(Path(tmp))
    # Repeated to a few MB so each level runs long enough to time; deflate's window is
    # 32 KiB, so repeats far apart compress as the original does.
    data = data * max(1, (8 << 20) // len(data))
    print(f"gzip: {len(data) / 1e6:.1f} MB of Chrome JSON (our export), median of {args.runs}:")
    for level in (1, 3, 4, 6):

        def deflate(level: int = level) -> int:
            z = zlib.compressobj(level, zlib.DEFLATED, 31)
            n = 0
            for at in range(0, len(data), 1 << 20):
                n += len(z.compress(data[at : at + (1 << 20)]))
            return n + len(z.flush())

        size = deflate()
        seconds = best_of(deflate, args.runs)
        print(
            f"  level {level}   {len(data) / seconds / 1e6:7.1f} MB/s in   "
            f"{len(data) / size:5.2f}x smaller   {size / 1e6:6.2f} MB"
        )


def section_gather(args: argparse.Namespace) -> None:
    rng = np.random.default_rng(1)
    values = rng.integers(0, 1 << 40, 1_000_000)
    index = np.sort(rng.choice(values.shape[0], 500_000, replace=False))
    table = rng.integers(0, 256, (4096, 64), dtype=np.uint8)
    rows = rng.integers(0, table.shape[0], 1_000_000)
    print(f"gather (median of {args.runs}):")
    for label, fn in (
        ("column: values[index]", lambda: values[index]),
        ("column: np.take(values, index)", lambda: np.take(values, index)),
        ("rows: table[rows]", lambda: table[rows]),
        ("rows: np.take(table, rows, axis=0)", lambda: np.take(table, rows, axis=0)),
    ):
        print(f"  {label:<38} {best_of(fn, args.runs) * 1e3:8.2f} ms")


def section_sort(args: argparse.Namespace) -> None:
    rng = np.random.default_rng(2)
    n = 1_000_000
    device, stream = rng.integers(0, 8, n), rng.integers(0, 64, n)
    small = device * 64 + stream  # what _split_by_stream makes when it fits 16 bits
    wide = (device << 32) | stream
    print(f"sort: stable argsort of {n:,} keys, 512 distinct (median of {args.runs}):")
    for label, keys in (
        ("key < 2**16 as uint16 (radix)", small.astype(np.uint16)),
        ("key < 2**16 as int64 (merge)", small),
        ("(device << 32) | stream, int64 (merge)", wide),
    ):

        def sort(keys: np.ndarray = keys) -> np.ndarray:
            return np.argsort(keys, kind="stable")

        seconds = best_of(sort, args.runs)
        print(f"  {label:<38} {seconds * 1e3:8.2f} ms")


def section_mask(args: argparse.Namespace) -> None:
    rng = np.random.default_rng(3)
    rows, width = 200_000, 48
    matrix = rng.integers(0, 256, (rows, width), dtype=np.uint8)
    keep = np.ones((rows, width), dtype=bool)
    # Dropped bytes in runs: each row loses a tail of 0-8 bytes (a varint's unused bytes).
    tail = rng.integers(0, 9, rows)
    keep[np.arange(width) >= width - tail[:, None]] = False
    flat, flat_keep = matrix.reshape(-1), keep.reshape(-1)
    print(f"mask: {flat.shape[0] / 1e6:.1f} MB, dropped bytes in runs (median of {args.runs}):")
    for label, fn in (
        ("flat[mask]", lambda: flat[flat_keep]),
        ("np.compress(mask, flat)", lambda: np.compress(flat_keep, flat)),
    ):
        print(f"  {label:<38} {best_of(fn, args.runs) * 1e3:8.2f} ms")


def section_fdatasync(args: argparse.Namespace) -> None:
    where = Path(args.dir or ".")
    appends = 50
    print(f"fdatasync: append + fdatasync in {where.resolve()}, median of {appends}:")
    with tempfile.NamedTemporaryFile(dir=where, prefix=".bench-fdatasync-") as f:
        fd = f.fileno()
        for size in (4 << 10, 64 << 10, 1 << 20):
            block = os.urandom(size)
            times = []
            for _ in range(appends):
                t0 = time.perf_counter()
                os.write(fd, block)
                os.fdatasync(fd)
                times.append(time.perf_counter() - t0)
            print(f"  {size >> 10:5d} KiB batch   {statistics.median(times) * 1e3:8.3f} ms")


RUN: dict[str, Callable[[argparse.Namespace], None]] = {
    "imports": section_imports,
    "blas": section_blas,
    "gzip": section_gzip,
    "gather": section_gather,
    "sort": section_sort,
    "mask": section_mask,
    "fdatasync": section_fdatasync,
}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--only",
        default=",".join(SECTIONS),
        metavar="LIST",
        help=f"comma-separated sections to run (default: all: {','.join(SECTIONS)})",
    )
    parser.add_argument(
        "--runs", type=int, default=7, help="repeats per figure (default: %(default)s)"
    )
    parser.add_argument(
        "--dir", default=None, help="where fdatasync appends (default: the current directory)"
    )
    args = parser.parse_args()
    wanted = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in wanted if s not in RUN]
    if unknown:
        parser.error(f"unknown section(s) {unknown}: choose from {', '.join(SECTIONS)}")
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"design_choices: {os.cpu_count()} CPUs, load average {load}, "
        f"numpy {np.__version__}, Python {sys.version.split()[0]}"
    )
    for name in wanted:
        RUN[name](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
