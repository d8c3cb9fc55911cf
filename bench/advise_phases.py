"""Where ``advise`` spends its time and memory: seconds and peak RSS of each rule read
alone through the read engine (one ``engine.read`` per rule: its queries and sweeps),
then of every rule in one read (what ``advise`` runs: a query or sweep two rules ask is
computed once), on a data dir that bench/summary_scale.py or bench/read_scale_lake.py
built. Each phase's peak is its own: the kernel's high-water mark is reset before it
(/proc/self/clear_refs). Prints figures; asserts nothing.

    .venv/bin/python bench/advise_phases.py /work/benchdata/10000000x4
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import time
from collections.abc import Iterator
from pathlib import Path


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) // 1024
    return 0


@contextlib.contextmanager
def phase(label: str) -> Iterator[None]:
    gc.collect()
    before = _status("VmRSS")
    with contextlib.suppress(OSError):  # resets VmHWM to the current RSS
        Path("/proc/self/clear_refs").write_text("5")
    t0 = time.perf_counter()
    yield
    seconds = time.perf_counter() - t0
    print(f"{label:28s} {seconds:8.2f} {before:10,d} {_status('VmHWM'):10,d} "
          f"{_status('VmRSS'):10,d}", flush=True)  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("data_dir", help="a data dir bench/summary_scale.py built")
    args = p.parse_args()
    print(f"{'phase':28s} {'seconds':>8s} {'RSS in':>10s} {'peak MiB':>10s} {'RSS out':>10s}")
    with phase("imports"):
        from tfprof.collector.config import import_numpy_without_blas_threads

        import_numpy_without_blas_threads()  # as the CLI does first
        from tfprof.collector.advice import RULES, advise
        from tfprof.collector.lake.reader import open_jobs
        from tfprof.collector.read.lake_catalog import catalog
        from tfprof.collector.timeline.prepare import TimeWindow
    with phase("catalog"):
        cat = catalog(open_jobs([args.data_dir]).jobs, TimeWindow())
    for rule in RULES:
        with phase(rule.name):
            advise(cat, [rule.name])
    with phase("every rule, one read"):
        advise(cat)


if __name__ == "__main__":
    main()
