"""Summaries of collected GPU records: one analysis per module, pure functions over the
columnar ``RecordSet`` (records.py), and this thin facade that names the views.

    rs = prepare(jobs, since_ns, until_ns)
    rows = VIEWS["kernels"].rows(rs)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tfprof.collector.analysis import gpus, jobs, kernels, memcpy, streams
from tfprof.collector.analysis.errors import AnalysisError
from tfprof.collector.analysis.filters import Filters, apply_filters
from tfprof.collector.analysis.notes import notes
from tfprof.collector.analysis.records import RecordSet, prepare
from tfprof.collector.analysis.render import ViewReport


@dataclass(frozen=True)
class View:
    name: str
    help: str
    rows: Callable[[RecordSet], Sequence[Any]]
    row_type: type
    name_field: str  # what --show/--hide-name-regex match
    time_field: str  # what --min-micros compares
    hidden: tuple[str, ...] = ()  # fields left out unless --select names them


VIEWS: dict[str, View] = {
    v.name: v
    for v in (
        View("kernels", "per kernel name: count, total/avg/min/max us, % of GPU busy time",
             kernels.kernel_rows, kernels.KernelRow, kernels.NAME_FIELD, kernels.TIME_FIELD,
             hidden=("job",)),
        View("kernels-by-job", "the kernels view per (job, kernel name)",
             lambda rs: kernels.kernel_rows(rs, per_job=True), kernels.KernelRow,
             kernels.NAME_FIELD, kernels.TIME_FIELD),
        View("streams", "per (job, task, device, stream): busy us and %, kernels, copies, memsets",
             streams.stream_rows, streams.StreamRow, streams.NAME_FIELD, streams.TIME_FIELD),
        View("gpus", "per physical GPU: busy/idle %, longest idle gaps, each job's share",
             gpus.gpu_rows, gpus.GpuRow, gpus.NAME_FIELD, gpus.TIME_FIELD),
        View("memcpy", "per copy kind x memory kinds: count, bytes, us, GB/s, % overlapped",
             memcpy.memcpy_rows, memcpy.MemcpyRow, memcpy.NAME_FIELD, memcpy.TIME_FIELD),
        View("jobs", "per job: processes, GPUs, kernel/copy time, records, dropped",
             jobs.job_rows, jobs.JobRow, jobs.NAME_FIELD, jobs.TIME_FIELD),
    )
}  # fmt: skip


def view_report(view: str, rs: RecordSet, filters: Filters | None = None) -> ViewReport:
    spec = VIEWS.get(view)
    if spec is None:
        raise AnalysisError(f"unknown view {view!r}; views are {', '.join(VIEWS)}")
    rows, fields = apply_filters(
        spec.rows(rs), spec.row_type, spec.name_field, spec.time_field, filters or Filters()
    )
    if not (filters and filters.select):
        fields = tuple(f for f in fields if f not in spec.hidden)
    return ViewReport(
        notes=notes(rs),
        view=view,
        jobs=tuple(j.label for j in rs.jobs),
        start_ns=rs.start_ns,
        end_ns=rs.end_ns,
        fields=fields,
        rows=rows,
    )


__all__ = ["VIEWS", "AnalysisError", "Filters", "RecordSet", "View", "prepare", "view_report"]
