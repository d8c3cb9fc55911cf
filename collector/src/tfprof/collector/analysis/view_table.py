"""The ``summary`` views by name: what computes each (``View``) and its report.

    report = read_view_report("kernels", catalog, filters)

Each view's ``View`` is made when asked for (``view``), importing only that view's
module: the CLI names the views on every start (``VIEW_NAMES``), and one view's command
need not load the others' analyses.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tfprof.collector.errors import AnalysisError

if TYPE_CHECKING:
    from tfprof.collector.analysis.filters import Filters
    from tfprof.collector.analysis.view_render import ViewReport
    from tfprof.collector.analysis.view_rows import ViewRows
    from tfprof.collector.read.lake_catalog import Catalog
    from tfprof.collector.read.needs import Need


@dataclass(frozen=True)
class View:
    name: str
    help: str
    row_type: type
    name_field: str  # what --show/--hide-name-regex match
    time_field: str  # what --min-micros compares
    # What the view reads through the read engine (``tfprof.collector.read``) and how
    # its rows (and, with ``ViewRows``, why it is empty or partial) are built.
    need: Need[Sequence[Any] | ViewRows]
    hidden: tuple[str, ...] = ()  # fields left out unless --select names them
    depth_field: str = ""  # what --max-depth compares (tree views)


def _kernels(per_job: bool) -> View:
    from tfprof.collector.analysis import kernels as m

    if per_job:
        return View(
            "kernels-by-job",
            "the kernels view per (job, kernel name)",
            m.KernelRow,
            m.NAME_FIELD,
            m.TIME_FIELD,
            need=m.KernelsNeed(per_job=True),
        )
    return View(
        "kernels",
        "per kernel name: count, total/avg/min/max us, % of GPU busy time",
        m.KernelRow,
        m.NAME_FIELD,
        m.TIME_FIELD,
        hidden=("job",),
        need=m.KernelsNeed(),
    )


def _streams() -> View:
    from tfprof.collector.analysis import streams as m

    return View(
        "streams",
        "per (job, task, device, stream): busy us and %, kernels, copies, memsets",
        m.StreamRow,
        m.NAME_FIELD,
        m.TIME_FIELD,
        need=m.StreamsNeed(),
    )


def _gpus() -> View:
    from tfprof.collector.analysis import gpus as m

    return View(
        "gpus",
        "per physical GPU: busy/idle %, longest idle gaps, each job's share",
        m.GpuRow,
        m.NAME_FIELD,
        m.TIME_FIELD,
        need=m.GpusNeed(),
    )


def _memcpy() -> View:
    from tfprof.collector.analysis import memcpy as m

    return View(
        "memcpy",
        "per copy kind x memory kinds: count, bytes, us, GB/s, % overlapped",
        m.MemcpyRow,
        m.NAME_FIELD,
        m.TIME_FIELD,
        need=m.MemcpyNeed(),
    )


def _jobs() -> View:
    from tfprof.collector.analysis import job_totals as m

    return View(
        "jobs",
        "per job: processes, GPUs, kernel/copy time, records, dropped",
        m.JobRow,
        m.NAME_FIELD,
        m.TIME_FIELD,
        need=m.JobsNeed(),
    )


def _op() -> View:
    from tfprof.collector.analysis import ops as m

    return View(
        "op",
        "per op (framework op, NVTX range): count, GPU time, kernels, launch CPU time",
        m.OpRow,
        m.NAME_FIELD,
        m.TIME_FIELD,
        need=m.OpsNeed(),
    )


def _scope() -> View:
    from tfprof.collector.analysis import scopes as m

    return View(
        "scope",
        "name-scope tree of the ops (split at /): self and total GPU time",
        m.ScopeRow,
        m.NAME_FIELD,
        m.TIME_FIELD,
        depth_field=m.DEPTH_FIELD,
        need=m.ScopesNeed(),
    )


def _api() -> View:
    from tfprof.collector.analysis import api as m

    return View(
        "api",
        "per CUDA API call: calls, total/mean/median/min/max us, errors",
        m.ApiRow,
        m.NAME_FIELD,
        m.TIME_FIELD,
        need=m.ApiNeed(),
    )


def _launch() -> View:
    from tfprof.collector.analysis import launch as m

    return View(
        "launch",
        "per kernel name: launch latency, CPU launch time, stream queue depth",
        m.LaunchRow,
        m.NAME_FIELD,
        m.TIME_FIELD,
        need=m.LaunchNeed(),
    )


def _memory() -> View:
    from tfprof.collector.analysis import memory_view as m

    return View(
        "memory",
        "per job and GPU: peak device memory, % of the GPU, a coarse timeline",
        m.MemoryRow,
        m.NAME_FIELD,
        m.TIME_FIELD,
        need=m.MemoryNeed(),
    )


def _collectives() -> View:
    from tfprof.collector.analysis import collective_rows as m

    return View(
        "collectives",
        "per job, process group and collective type: calls, bytes, "
        "kernel time, exposed time, algorithm, algbw/busbw (as nccl-tests)",
        m.CollectiveRow,
        m.NAME_FIELD,
        m.TIME_FIELD,
        need=m.CollectivesNeed(),
    )


def _steps() -> View:
    from tfprof.collector.analysis import step_rows as m

    return View(
        "steps",
        "per step and rank: device time split into compute, communication "
        "(overlapped, exposed), copies, idle (foreign work, sync, other CUDA, "
        "outside)",
        m.StepRow,
        m.NAME_FIELD,
        m.TIME_FIELD,
        hidden=("start_ns", "records", "comm_us", "copy_us"),
        need=m.StepsNeed(),
    )


def _ranks() -> View:
    from tfprof.collector.analysis import step_rows as m

    return View(
        "ranks",
        "per rank: steady step time p50/p95/max, compute, communication, "
        "exposed communication, overlap, idle % (as HTA)",
        m.RankRow,
        m.NAME_FIELD,
        m.RANKS_TIME_FIELD,
        hidden=(
            "idle_foreign_pct",
            "idle_sync_pct",
            "idle_other_cuda_pct",
            "idle_outside_cuda_pct",
        ),
        need=m.RanksNeed(),
    )


_MAKE: dict[str, Callable[[], View]] = {
    "kernels": lambda: _kernels(per_job=False), "kernels-by-job": lambda: _kernels(per_job=True),
    "streams": _streams, "gpus": _gpus, "memcpy": _memcpy, "jobs": _jobs, "op": _op,
    "scope": _scope, "api": _api, "launch": _launch, "memory": _memory,
    "collectives": _collectives, "steps": _steps, "ranks": _ranks,
}  # fmt: skip
VIEW_NAMES = tuple(_MAKE)  # in --view's order


def view(name: str) -> View:
    """The view named ``name``; ``AnalysisError`` for a name that is none."""
    make = _MAKE.get(name)
    if make is None:
        raise AnalysisError(f"unknown view {name!r}; views are {', '.join(VIEW_NAMES)}")
    return make()


def read_view_report(name: str, cat: Catalog, filters: Filters | None = None) -> ViewReport:
    """The view of the catalog's records, read through the read engine."""
    from tfprof.collector.analysis.notes import job_notes
    from tfprof.collector.analysis.view_rows import ViewRows
    from tfprof.collector.read import engine

    spec = view(name)
    read, (found,) = engine.read(cat, [spec.need])
    rows, more = (found.rows, found.notes) if isinstance(found, ViewRows) else (found, ())
    notes = job_notes(read.jobs, read.with_records) + more
    # Files left out: what the view does not count, and why.
    notes += tuple(f"job {d.job}: {d.line()}" for d in read.damage)
    labels = tuple(j.label for j in read.jobs)
    return _report(spec, rows, filters, notes, labels, read.start_ns, read.end_ns)


def _report(
    spec: View,
    found: Sequence[Any],
    filters: Filters | None,
    lines: tuple[str, ...],
    jobs: tuple[str, ...],
    start_ns: int,
    end_ns: int,
) -> ViewReport:
    from tfprof.collector.analysis.filters import Filters, apply_filters
    from tfprof.collector.analysis.view_render import ViewReport

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
