"""The ``jobs`` view: per job run, its processes and GPUs, GPU time by activity, records
and what was lost on the way (dropped records).

``JobsNeed`` reads it through the read engine (one SQL GROUP BY)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tfprof.collector.analysis.units import us
from tfprof.collector.read.engine import SPANS, Read
from tfprof.collector.read.needs import Got, Query, Sweep
from tfprof.collector.store.traced_windows import union_ns

NAME_FIELD = "job"
TIME_FIELD = "kernel_us"


@dataclass(frozen=True)
class JobRow:
    job: str
    run_id: str
    processes: int
    gpus: int  # physical GPUs (by UUID) with records in the window
    kernels: int
    kernel_us: float  # summed kernel durations
    copies: int
    copy_us: float
    copy_bytes: int
    memsets: int
    memset_us: float
    syncs: int
    sync_us: float
    # Every record of the run (GPU activity and the host side, whole run), as ``jobs`` and
    # the ``runs`` SQL view count them; ``gpu_records`` are those of the window's kernels,
    # copies, memsets and syncs.
    records: int
    dropped: int  # lost before the collector, over the whole run
    # From the host samples (taken with or without a GPU), in the window:
    host_seconds: float  # first to last sample
    cpu_percent_mean: float  # each process's mean CPU %, summed
    rss_max_bytes: int  # each process's peak RSS, summed
    source: str  # the processes' record sources: cupti, none (no GPU tracing), replay:...
    gpu_records: int = 0  # added after the fields above: CSV columns keep their positions
    # The time its processes were traced in, whole run: the union of their capture windows
    # (a process traced throughout: its first record to its last), as ``jobs`` says it.
    captured_us: float = 0.0


# Every record of each job run, whole run (whatever the window), as ``jobs`` counts them:
# the rows of ``{g_all}`` and ``{h_all}``, counted from the footers (``{n_all}``).
_RUN_RECORDS = Query("SELECT job, sum(n) FROM {n_all} GROUP BY job")


@dataclass(frozen=True)
class JobsNeed:
    def queries(self) -> Sequence[Query]:
        return (SPANS, _RUN_RECORDS)

    def sweeps(self) -> Sequence[Sweep[Any]]:
        return ()

    def build(self, got: Got) -> list[JobRow]:
        read = got.read
        sums: dict[tuple[int, int], tuple[int, int, int]] = {}
        for j, _, _, k, n, ns, b, _, _ in got.rows(SPANS):
            n0, ns0, b0 = sums.get((j, k), (0, 0, 0))
            sums[(j, k)] = (n0 + int(n), ns0 + int(ns), b0 + int(b))
        stored = {int(j): int(n) for j, n in got.rows(_RUN_RECORDS)}
        gpus: dict[int, set[int]] = {}
        for job, process, device in read.pairs:
            gpus.setdefault(job, set()).add(read.gpu_of[(process, device)])
        rows = []
        for j, ref in enumerate(read.jobs):
            count, time, size = (
                {k: sums.get((j, k), (0, 0, 0))[at] for k in (1, 2, 3, 4)} for at in (0, 1, 2)
            )
            rows.append(
                JobRow(
                    job=ref.label,
                    run_id=ref.run_id,
                    processes=ref.processes,
                    gpus=len(gpus.get(j, ())),
                    kernels=count[1],
                    kernel_us=us(time[1]),
                    copies=count[2],
                    copy_us=us(time[2]),
                    copy_bytes=size[2],
                    memsets=count[3],
                    memset_us=us(time[3]),
                    syncs=count[4],
                    sync_us=us(time[4]),
                    records=stored.get(j, 0),
                    dropped=ref.dropped,
                    host_seconds=round((ref.host.end_ns - ref.host.start_ns) / 1e9, 3),
                    cpu_percent_mean=ref.host.cpu_percent_mean,
                    rss_max_bytes=ref.host.rss_max_bytes,
                    source=",".join(ref.sources),
                    gpu_records=sum(count.values()),
                    captured_us=us(union_ns(_windows(read, j))),
                )
            )
        rows.sort(key=lambda r: (-r.kernel_us, r.job))
        return rows


def _windows(read: Read, job: int) -> list[tuple[int, int]]:
    groups = [g for p, g in zip(read.processes, read.cat.groups, strict=True) if p.job == job]
    return [(a, b) for group in groups for s in group for _, _, a, b in s.capture_windows]
