"""A snapshot as text: the two tables (shared by ``--once`` and the live view) and JSON."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TextIO

import orjson

from tfprof.collector.terminal import TextWriter
from tfprof.collector.top.snapshot import NOTE, JobRow, Snapshot, job_names


@dataclass(frozen=True)
class Table:
    title: str
    header: tuple[str, ...]
    right_aligned: tuple[bool, ...]
    rows: Sequence[tuple[str, ...]]


def _rate(value: float) -> str:
    return f"{value:,.1f}" if value < 100 else f"{value:,.0f}"


def gpu_table(snapshot: Snapshot) -> Table:
    rows = [
        (g.host, g.gpu_uuid, f"{g.busy_percent:.1f}", _rate(g.kernels_per_s), job_names(g.jobs))
        for g in snapshot.gpus
    ]
    return Table(
        "GPUs",
        ("HOST", "GPU", "BUSY %", "KERNELS/S", "JOBS (share of busy time)"),
        (False, False, True, True, False),
        rows,
    )


def job_table(snapshot: Snapshot) -> Table:
    rows = [
        (
            j.job,
            str(j.processes),
            f"{j.busy_percent:.1f}",
            _rate(j.kernels_per_s),
            f"{j.copy_gb_per_s:.3f}",
            f"{int(j.dropped_total):,}",
            str(len(j.gpus)),
            "-" if j.step_seconds is None else f"{j.step_seconds * 1e3:,.1f}",
            _slowest(j),
        )
        for j in snapshot.jobs
    ]
    return Table(
        "Jobs",
        (
            "JOB",
            "PROCESSES",
            "BUSY %",
            "KERNELS/S",
            "COPY GB/S",
            "DROPPED",
            "GPUS",
            "STEP MS",
            "SLOWEST RANK (skew)",
        ),
        (False, True, True, True, True, True, True, True, False),
        rows,
    )


def _slowest(j: JobRow) -> str:
    if j.slowest_rank is None:
        return "-"
    return f"{j.slowest_rank} (+{(j.slowest_skew_seconds or 0.0) * 1e3:,.1f} ms)"


def write_table(snapshot: Snapshot, out: TextIO) -> None:
    writer = TextWriter(out)
    writer.line(f"{NOTE}; rates over {snapshot.interval_s:.1f} s")
    for table in (gpu_table(snapshot), job_table(snapshot)):
        writer.line()
        if table.rows:
            writer.table(table.header, table.rows, table.right_aligned)
        else:
            writer.line(f"no {table.title.lower()} with records")


def as_json(snapshot: Snapshot, collector: str) -> dict[str, Any]:
    return {
        "collector": collector,
        "interval_s": snapshot.interval_s,
        "note": NOTE,
        "gpus": [
            {
                "host": g.host,
                "gpu_uuid": g.gpu_uuid,
                "busy_percent": g.busy_percent,
                "kernels_per_s": g.kernels_per_s,
                "busy_seconds_total": g.busy_seconds_total,
                "kernels_total": g.kernels_total,
                "jobs": [
                    {
                        "job": s.job,
                        "busy_percent": s.busy_percent,
                        "share_percent": s.share_percent,
                        "busy_seconds_total": s.busy_seconds_total,
                        "kernels_total": s.kernels_total,
                    }
                    for s in g.jobs
                ],
            }
            for g in snapshot.gpus
        ],
        "jobs": [
            {
                "job": j.job,
                "processes": j.processes,
                "busy_percent": j.busy_percent,
                "kernels_per_s": j.kernels_per_s,
                "copy_gb_per_s": j.copy_gb_per_s,
                "dropped_total": j.dropped_total,
                "dropped_per_s": j.dropped_per_s,
                "busy_seconds_total": j.busy_seconds_total,
                "kernels_total": j.kernels_total,
                "copies_total": j.copies_total,
                "copy_bytes_total": j.copy_bytes_total,
                "gpus": list(j.gpus),
                "step_seconds": j.step_seconds,
                "slowest_rank": j.slowest_rank,
                "slowest_skew_seconds": j.slowest_skew_seconds,
            }
            for j in snapshot.jobs
        ],
    }


def write_json(snapshot: Snapshot, collector: str, out: TextIO) -> None:
    out.write(orjson.dumps(as_json(snapshot, collector), option=orjson.OPT_INDENT_2).decode())
    out.write("\n")
