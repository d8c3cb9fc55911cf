"""Summaries of collected GPU records: one analysis per module, pure functions over the
columnar ``RecordSet`` (record_set.py), and this thin facade that names the views.

    rs = prepare(jobs, since_ns, until_ns)
    rows = VIEWS["kernels"].rows(rs)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tfprof.collector.analysis import (
    api,
    collective_rows,
    gpus,
    job_totals,
    kernels,
    launch,
    memcpy,
    memory_view,
    ops,
    scopes,
    step_rows,
    streams,
)
from tfprof.collector.analysis.filters import Filters, apply_filters
from tfprof.collector.analysis.notes import job_notes, notes
from tfprof.collector.analysis.record_set import RecordSet
from tfprof.collector.analysis.records import prepare
from tfprof.collector.analysis.view_render import ViewReport
from tfprof.collector.analysis.view_rows import ViewRows
from tfprof.collector.errors import AnalysisError
from tfprof.collector.read import engine
from tfprof.collector.read.lake_catalog import Catalog
from tfprof.collector.read.needs import Need


@dataclass(frozen=True)
class View:
    name: str
    help: str
    rows: Callable[[RecordSet], Sequence[Any]]
    row_type: type
    name_field: str  # what --show/--hide-name-regex match
    time_field: str  # what --min-micros compares
    hidden: tuple[str, ...] = ()  # fields left out unless --select names them
    depth_field: str = ""  # what --max-depth compares (tree views)
    # Why the view is empty or partial, in a line each (after the record set's notes).
    notes: Callable[[RecordSet], Sequence[str]] | None = None
    # Whether the view reads the host side (RecordSet.host, the GPU records' links); a
    # reader of stored jobs leaves it out for the views that do not.
    host: bool = True
    # The view read through the read engine (``tfprof.collector.read``): what it needs
    # and how its rows are built. Views without one still read a ``RecordSet``.
    need: Need[Sequence[Any] | ViewRows] | None = None

    @property
    def engine_only(self) -> bool:
        """No ``RecordSet`` version: ``read_view_report`` only (the distributed views)."""
        return self.rows is _engine_only


def _engine_only(rs: RecordSet) -> Sequence[Any]:
    raise AnalysisError("this view is read through the read engine only")


VIEWS: dict[str, View] = {
    v.name: v
    for v in (
        View("kernels", "per kernel name: count, total/avg/min/max us, % of GPU busy time",
             kernels.kernel_rows, kernels.KernelRow, kernels.NAME_FIELD, kernels.TIME_FIELD,
             hidden=("job",), host=False, need=kernels.KernelsNeed()),
        View("kernels-by-job", "the kernels view per (job, kernel name)",
             lambda rs: kernels.kernel_rows(rs, per_job=True), kernels.KernelRow,
             kernels.NAME_FIELD, kernels.TIME_FIELD, host=False,
             need=kernels.KernelsNeed(per_job=True)),
        View("streams", "per (job, task, device, stream): busy us and %, kernels, copies, memsets",
             streams.stream_rows, streams.StreamRow, streams.NAME_FIELD, streams.TIME_FIELD,
             host=False, need=streams.StreamsNeed()),
        View("gpus", "per physical GPU: busy/idle %, longest idle gaps, each job's share",
             gpus.gpu_rows, gpus.GpuRow, gpus.NAME_FIELD, gpus.TIME_FIELD, host=False,
             need=gpus.GpusNeed()),
        View("memcpy", "per copy kind x memory kinds: count, bytes, us, GB/s, % overlapped",
             memcpy.memcpy_rows, memcpy.MemcpyRow, memcpy.NAME_FIELD, memcpy.TIME_FIELD,
             host=False, need=memcpy.MemcpyNeed()),
        View("jobs", "per job: processes, GPUs, kernel/copy time, records, dropped",
             job_totals.job_rows, job_totals.JobRow, job_totals.NAME_FIELD,
             job_totals.TIME_FIELD, host=False, need=job_totals.JobsNeed()),
        View("op", "per op (framework op, NVTX range): count, GPU time, kernels, launch CPU time",
             ops.op_rows, ops.OpRow, ops.NAME_FIELD, ops.TIME_FIELD, notes=ops.op_notes,
             need=ops.OpsNeed()),
        View("scope", "name-scope tree of the ops (split at /): self and total GPU time",
             scopes.scope_rows, scopes.ScopeRow, scopes.NAME_FIELD, scopes.TIME_FIELD,
             depth_field=scopes.DEPTH_FIELD, notes=ops.op_notes, need=scopes.ScopesNeed()),
        View("api", "per CUDA API call: calls, total/mean/median/min/max us, errors",
             api.api_rows, api.ApiRow, api.NAME_FIELD, api.TIME_FIELD, notes=api.api_notes,
             need=api.ApiNeed()),
        View("launch", "per kernel name: launch latency, CPU launch time, stream queue depth",
             launch.launch_rows, launch.LaunchRow, launch.NAME_FIELD, launch.TIME_FIELD,
             notes=launch.launch_notes, need=launch.LaunchNeed()),
        View("memory", "per job and GPU: peak device memory, % of the GPU, a coarse timeline",
             memory_view.memory_rows, memory_view.MemoryRow, memory_view.NAME_FIELD,
             memory_view.TIME_FIELD, notes=memory_view.memory_notes,
             need=memory_view.MemoryNeed()),
        View("collectives", "per job, process group and collective type: calls, bytes, "
             "kernel time, exposed time, algorithm, algbw/busbw (as nccl-tests)",
             _engine_only, collective_rows.CollectiveRow, collective_rows.NAME_FIELD,
             collective_rows.TIME_FIELD, need=collective_rows.CollectivesNeed()),
        View("steps", "per step and rank: device time split into compute, communication "
             "(overlapped, exposed), copies, idle (foreign work, sync, other CUDA, outside)",
             _engine_only, step_rows.StepRow, step_rows.NAME_FIELD, step_rows.TIME_FIELD,
             hidden=("start_ns", "records", "comm_us", "copy_us"), need=step_rows.StepsNeed()),
        View("ranks", "per rank: steady step time p50/p95/max, compute, communication, "
             "exposed communication, overlap, idle % (as HTA)",
             _engine_only, step_rows.RankRow, step_rows.NAME_FIELD, step_rows.RANKS_TIME_FIELD,
             hidden=("idle_foreign_pct", "idle_sync_pct", "idle_other_cuda_pct",
                     "idle_outside_cuda_pct"), need=step_rows.RanksNeed()),
    )
}  # fmt: skip


def view_report(view: str, rs: RecordSet, filters: Filters | None = None) -> ViewReport:
    spec = _spec(view)
    lines = notes(rs) + tuple(spec.notes(rs) if spec.notes else ())
    labels = tuple(j.label for j in rs.jobs)
    return _report(spec, spec.rows(rs), filters, lines, labels, rs.start_ns, rs.end_ns)


def read_view_report(view: str, cat: Catalog, filters: Filters | None = None) -> ViewReport:
    """The view of the catalog's records, read through the read engine."""
    spec = _spec(view)
    if spec.need is None:
        raise AnalysisError(f"view {view!r} is not read through the read engine yet")
    read, (found,) = engine.read(cat, [spec.need])
    rows, more = (found.rows, found.notes) if isinstance(found, ViewRows) else (found, ())
    notes = job_notes(read.jobs, read.with_records) + more
    # Files left out: what the view does not count, and why.
    notes += tuple(f"job {d.job}: {d.line()}" for d in read.damage)
    labels = tuple(j.label for j in read.jobs)
    return _report(spec, rows, filters, notes, labels, read.start_ns, read.end_ns)


def _spec(view: str) -> View:
    spec = VIEWS.get(view)
    if spec is None:
        raise AnalysisError(f"unknown view {view!r}; views are {', '.join(VIEWS)}")
    return spec


def _report(
    spec: View,
    found: Sequence[Any],
    filters: Filters | None,
    lines: tuple[str, ...],
    jobs: tuple[str, ...],
    start_ns: int,
    end_ns: int,
) -> ViewReport:
    rows, fields = apply_filters(
        found, spec.row_type, spec.name_field, spec.time_field, filters or Filters(),
        spec.depth_field,
    )  # fmt: skip
    if not (filters and filters.select):
        fields = tuple(f for f in fields if f not in spec.hidden)
    return ViewReport(
        notes=lines,
        view=spec.name,
        jobs=jobs,
        start_ns=start_ns,
        end_ns=end_ns,
        fields=fields,
        rows=rows,
    )


__all__ = ["VIEWS", "AnalysisError", "Filters", "RecordSet", "View", "prepare", "view_report"]
