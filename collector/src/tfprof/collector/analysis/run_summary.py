"""The short end-of-run summary the embedded collector prints, built on the same
analyses as ``tfprof-collector summary`` (the ``jobs``, ``gpus`` and ``kernels`` views).

Per job: processes, GPUs, session length and GPU busy share; a table of GPU activity;
the top kernels as ``nsys stats`` lists them (share, total, instances, mean, median,
standard deviation); then the commands that look further. Every time column is scaled
to one unit (µs, ms or s) that suits its largest value, named in its header.
"""

from __future__ import annotations

import io
import os
import shlex
from collections.abc import Sequence
from typing import Any, cast

from tfprof.collector.analysis.gpus import GpuRow, GpusNeed
from tfprof.collector.analysis.job_totals import JobRow, JobsNeed
from tfprof.collector.analysis.kernels import KernelRow, KernelsNeed
from tfprof.collector.analysis.notes import job_notes
from tfprof.collector.jobdata import JobData
from tfprof.collector.read import engine
from tfprof.collector.read.lake_catalog import catalog
from tfprof.collector.read.needs import Need
from tfprof.collector.terminal import TextWriter
from tfprof.collector.timeline.prepare import TimeWindow

NAME_WIDTH = 60
INDENT = "  "
_TIME_UNITS = ((1e6, "s"), (1e3, "ms"), (1.0, "µs"))
_BYTE_UNITS = ((1e9, "GB"), (1e6, "MB"), (1e3, "kB"), (1.0, "B"))


def _scale(values: Sequence[float], units: tuple[tuple[float, str], ...]) -> tuple[float, str]:
    """The largest unit that keeps the column's biggest value at 1 or more."""
    top = max(values, default=0.0)
    return next(((f, u) for f, u in units if top >= f), units[-1])


def _times(values: Sequence[float]) -> tuple[list[str], str]:
    """Microsecond values in one unit, and the unit."""
    factor, unit = _scale(values, _TIME_UNITS)
    return [f"{v / factor:,.3f}" for v in values], unit


def _plural(n: int, word: str, plural: str = "s") -> str:
    return f"{n:,} {word}{plural if n != 1 else ''}"


def _session_seconds(read: engine.Read, host_seconds: float) -> float:
    """The host samples' span when there are any (GPU or not), else the records' span."""
    return host_seconds if host_seconds > 0 else read.window_ns / 1e9


def _indented(text: str) -> list[str]:
    return [INDENT + line if line else line for line in text.splitlines()]


def _job_lines(job: JobData, top: int) -> list[str]:
    # One read of the job through the read engine, as `summary` reads its views: memory
    # bounded by the read, not by the job's records.
    needs: list[Need[Any]] = [JobsNeed(), GpusNeed(), KernelsNeed()]
    read, (jobs, found_gpus, found_kernels) = engine.read(catalog([job], TimeWindow()), needs)
    (row,) = cast(list[JobRow], jobs)
    head = (
        f"tfprof: job {job.label}: {_plural(row.processes, 'traced process', 'es')}, "
        f"{_plural(row.gpus, 'GPU')}, session {_session_seconds(read, row.host_seconds):,.3f} s"
    )
    gpus = cast(list[GpuRow], found_gpus)
    if gpus:
        busy = ", ".join(f"{g.busy_pct:.1f} %" for g in gpus)
        head += f", GPU busy {busy}"
    lines = [head]
    notes = job_notes(read.jobs, read.with_records)
    notes += tuple(f"job {d.job}: {d.line()}" for d in read.damage)  # files left out
    for note in notes:  # no GPU record: say so plainly, and show no empty tables
        lines.append(f"{INDENT}{note}")
    lines.append(f"{INDENT}dropped {_plural(row.dropped, 'record')} before the collector")
    if not read.with_records:
        return lines
    out = io.StringIO()
    table = TextWriter(out, colour=False)
    times, t_unit = _times([row.kernel_us, row.copy_us, row.memset_us])
    b_factor, b_unit = _scale([row.copy_bytes], _BYTE_UNITS)
    table.table(
        ["Activity", "Count", f"Time ({t_unit})", f"Bytes ({b_unit})"],
        [
            ["kernels", f"{row.kernels:,}", times[0], ""],
            ["copies", f"{row.copies:,}", times[1], f"{row.copy_bytes / b_factor:,.1f}"],
            ["memsets", f"{row.memsets:,}", times[2], ""],
        ],
        [False, True, True, True],
    )
    kernels = cast(list[KernelRow], found_kernels)[:top]
    if kernels:
        columns = [
            _times([k.total_us for k in kernels]),
            _times([k.avg_us for k in kernels]),
            _times([k.median_us for k in kernels]),
            _times([k.stddev_us for k in kernels]),
        ]
        header = ["Time (%)"]
        header += [f"{title} ({unit})" for title, (_, unit) in zip(
            ("Total", "Avg", "Med", "StdDev"), columns, strict=True)]  # fmt: skip
        header[2:2] = ["Instances"]
        rows = []
        for i, k in enumerate(kernels):
            name = k.name if len(k.name) <= NAME_WIDTH else k.name[: NAME_WIDTH - 3] + "..."
            cells = [c[0][i] for c in columns]
            rows.append([f"{k.kernel_time_pct:.1f}", cells[0], f"{k.count:,}", *cells[1:], name])
        out.write("\n")
        table.table([*header, "Name"], rows, [True] * (len(header)) + [False])
    return lines + _indented(out.getvalue())


def _next_steps(trace: str | os.PathLike[str]) -> list[str]:
    """The commands that look further. The embedded store is deleted at job end, so they
    read the trace file written, which ``summary``, ``advise`` and ``export`` all take."""
    path = os.fspath(trace)
    stem = path
    for suffix in (".json.gz", ".json"):
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
            break
    t, perfetto = shlex.quote(path), shlex.quote(stem + ".pftrace")
    return [
        "tfprof: next:",
        f"{INDENT}tfprof-collector summary {t}",
        f"{INDENT}tfprof-collector advise {t}",
        f"{INDENT}tfprof-collector export {t} -o {perfetto}",
    ]


def short_summary(
    jobs: Sequence[JobData],
    top: int = 5,
    trace: str | os.PathLike[str] | None = None,
) -> str:
    """The summary text of ``jobs`` (lake streams: ``lake.reader.open_jobs``, or trace
    files as ``read.trace_files`` reads them); with the ``trace`` file written, the
    commands to run next."""
    if not jobs:
        return "tfprof: no traced processes\n"
    lines = [line for job in jobs for line in _job_lines(job, top)]
    if trace is not None:
        lines += _next_steps(trace)
    return "\n".join(lines) + "\n"
