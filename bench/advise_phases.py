"""Where ``advise`` spends its time and memory: seconds and peak RSS of each phase, in
the order ``advise_gpu_first`` runs them (open the jobs, read the GPU table, each GPU
rule on one shared context, the host pass, each host rule), on a data dir that
bench/summary_scale.py built. Each phase's peak is its own: the kernel's high-water
mark is reset before it (/proc/self/clear_refs). Each phase runs alone here: advise
itself runs the GPU rules while the host pass reads, up to ``CONCURRENT_GPU_ROWS`` GPU
records. Prints figures; asserts nothing.

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
        from tfprof.collector.advice import GPU_RULES_ONLY, HOST_RULES, RULES, HostRows
        from tfprof.collector.advice.base import Context
        from tfprof.collector.analysis.records import prepare_gpu_first
        from tfprof.collector.lake.reader import open_jobs
    with phase("open_jobs"):
        jobs = open_jobs([args.data_dir]).jobs
    with phase("GPU table"):
        table = prepare_gpu_first(jobs)
    ctx = Context(table.rs)
    with phase("host-stalls' gaps"):
        gaps = ctx.long_gaps
    gpu_rules = [r for r in RULES if r.NAME not in HOST_RULES]
    for i, rule in enumerate(gpu_rules):
        with phase(rule.NAME):
            rule.check(ctx)
            ctx.release(r.NAME for r in gpu_rules[i + 1 :])  # as advise frees them
    with phase("GPU context freed"):
        del ctx
        table.release(GPU_RULES_ONLY)
    rows = HostRows(gaps)
    with phase("host pass"):
        linked = table.read(rows)
    ctx = Context(linked, rows)
    for rule in RULES:
        if rule.NAME in HOST_RULES:
            with phase(rule.NAME):
                rule.check(ctx)


if __name__ == "__main__":
    main()
