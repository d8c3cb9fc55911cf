"""The short end-of-run summary the embedded collector prints, built on the same
analyses as ``tfprof-collector summary`` (the ``jobs`` and ``kernels`` views)."""

from __future__ import annotations

from collections.abc import Sequence

from tfprof.collector.analysis.jobs import job_rows
from tfprof.collector.analysis.kernels import kernel_rows
from tfprof.collector.analysis.records import prepare
from tfprof.collector.model import JobData


def _ms(micros: float) -> str:
    return f"{micros / 1000:,.3f} ms"


def short_summary(jobs: Sequence[JobData], top: int = 5) -> str:
    lines = []
    for job in jobs:
        rs = prepare([job])
        (row,) = job_rows(rs)
        n_proc = row.processes
        lines.append(
            f"tfprof: job {job.label}: {n_proc} traced process{'es' if n_proc != 1 else ''}, "
            f"{row.gpus} GPU{'s' if row.gpus != 1 else ''}"
        )
        lines.append(
            f"  kernels {row.kernels:,} ({_ms(row.kernel_us)}), "
            f"copies {row.copies:,} ({row.copy_bytes / 1e6:,.1f} MB, "
            f"{_ms(row.copy_us)}), memsets {row.memsets:,}; "
            f"dropped {row.dropped:,}"
        )
        for k in kernel_rows(rs)[:top]:
            short = k.name if len(k.name) <= 60 else k.name[:57] + "..."
            lines.append(
                f"    {k.kernel_time_pct:5.1f}%  {_ms(k.total_us):>14}  {k.count:>7,}x  {short}"
            )
    return "\n".join(lines) + "\n" if lines else "tfprof: no traced processes\n"
