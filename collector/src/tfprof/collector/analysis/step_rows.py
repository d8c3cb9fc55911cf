"""Where each step's time goes, per rank: the ``steps`` and ``ranks`` views.

Both read one SQL statement (``lake.dist_sql.STEPS``, the same text ``sql`` and Spark
run over the lake) through the read engine: per (rank, GPU, complete step) the step's
device window and how its time splits. Definitions (docs/guides/distributed-jobs.md):

- a step's *own* work is the GPU work whose launching call started inside the step's
  host range (from its start to the next step's start); the step's device window runs
  from where the previous step's own work ended to where its own work ended, so the
  windows tile the device time of the complete steps, HTA's span;
- in that window: compute (union of own compute kernels), communication (own NCCL/RCCL
  kernels; the part no compute kernel covers is *exposed*), copies (exposed: under no
  kernel), and idle, split into *foreign* (the GPU ran work no complete step launched:
  before the capture, or by the last step, whose end was not captured), *sync* (the
  launching threads waited in a blocking CUDA call), *other CUDA* (in any other CUDA
  call) and *outside CUDA* (input pipeline, Python, the host);
- warm-up: the first complete step of a rank, and any step longer than 1.5x the median
  of its rank's complete steps; steady-state figures leave them out.

The ranks view's percentages are over all complete steps (HTA's definitions: they agree
with HTA 0.5.0's ``get_comm_comp_overlap`` and ``get_temporal_breakdown``); its step
times over steady steps.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tfprof.collector.analysis.units import pct, us
from tfprof.collector.lake.dist_sql import ENGINE, STEP_COLUMNS, STEPS
from tfprof.collector.read.needs import Got, Query, Sweep

STEPS_QUERY = Query(ENGINE.bind(STEPS), by_process=True)
WARMUP_FACTOR = 1.5  # a step this many times the rank's median step is warm-up
NAME_FIELD = "task"
TIME_FIELD = "duration_us"
RANKS_TIME_FIELD = "step_p50_us"


@dataclass(frozen=True)
class StepRow:
    job: str
    task: str  # the rank
    host: str
    gpu: str  # UUID
    step: int  # its number: ProfilerStep#N, the hook's count, or the period's index
    source: str  # ProfilerStep, hook, periodicity
    warmup: bool
    start_ns: int  # the device window's start, collector clock
    duration_us: float  # the device window
    host_us: float  # the step's host range (start to the next step's start)
    compute_us: float
    comm_us: float
    comm_overlapped_us: float
    comm_exposed_us: float
    copy_us: float
    copy_exposed_us: float
    idle_us: float
    idle_foreign_us: float
    idle_sync_us: float
    idle_other_cuda_us: float
    idle_outside_cuda_us: float
    first_launch_us: float  # from the step's start to its first launch
    records: int  # its own GPU records


@dataclass(frozen=True)
class RankRow:
    job: str
    task: str
    host: str
    gpu: str
    source: str
    steps: int  # complete steps
    steady_steps: int
    warmup_steps: list[int]
    step_p50_us: float  # steady steps, nearest rank
    step_p95_us: float
    step_max_us: float
    compute_pct: float  # of the complete steps' device time
    comm_pct: float
    comm_exposed_pct: float
    overlap_pct: float | None  # of communication time; None: no communication
    non_compute_pct: float  # exposed communication and copies (HTA's non-compute)
    idle_pct: float
    idle_foreign_pct: float
    idle_sync_pct: float
    idle_other_cuda_pct: float
    idle_outside_cuda_pct: float


@dataclass(frozen=True)
class _Raw:
    process: int
    device: int
    values: dict[str, Any]


def _raw(got: Got) -> list[_Raw]:
    out = []
    for row in got.rows(STEPS_QUERY):
        values = dict(zip(STEP_COLUMNS, row, strict=True))
        out.append(_Raw(int(values["rk"]), int(values["device"]), values))
    out.sort(key=lambda r: (r.process, r.device, r.values["start_ns"], r.values["step"]))
    return out


def warmup_flags(durations: Sequence[int]) -> list[bool]:
    """The first step, and any longer than ``WARMUP_FACTOR`` x the median."""
    if not durations:
        return []
    median = statistics.median(durations)
    return [i == 0 or d > WARMUP_FACTOR * median for i, d in enumerate(durations)]


def _group(raw: Sequence[_Raw]) -> dict[tuple[int, int], list[_Raw]]:
    groups: dict[tuple[int, int], list[_Raw]] = {}
    for r in raw:
        groups.setdefault((r.process, r.device), []).append(r)
    return groups


def _identity(got: Got, process: int, device: int) -> tuple[str, str, str, str]:
    read = got.read
    ref = read.processes[process]
    gpu = read.gpu_of.get((process, device))
    uuid = read.gpus[gpu].uuid if gpu is not None else f"{ref.host}/gpu:{device}"
    return read.jobs[ref.job].label, ref.task, ref.host, uuid


def _idle(v: dict[str, Any]) -> int:
    return int(v["duration_ns"] - v["compute_ns"] - v["comm_exposed_ns"] - v["copy_exposed_ns"])


def step_rows(got: Got) -> list[StepRow]:
    rows = []
    for (process, device), group in _group(_raw(got)).items():
        job, task, host, gpu = _identity(got, process, device)
        flags = warmup_flags([int(r.values["duration_ns"]) for r in group])
        for r, warm in zip(group, flags, strict=True):
            v = r.values
            idle = _idle(v)
            named = int(v["idle_foreign_ns"] + v["idle_sync_ns"] + v["idle_other_cuda_ns"])
            rows.append(
                StepRow(
                    job=job,
                    task=task,
                    host=host,
                    gpu=gpu,
                    step=int(v["step"]),
                    source=str(v["source"]),
                    warmup=warm,
                    start_ns=int(v["start_ns"]),
                    duration_us=us(v["duration_ns"]),
                    host_us=us(v["host_ns"]),
                    compute_us=us(v["compute_ns"]),
                    comm_us=us(v["comm_ns"]),
                    comm_overlapped_us=us(v["comm_ns"] - v["comm_exposed_ns"]),
                    comm_exposed_us=us(v["comm_exposed_ns"]),
                    copy_us=us(v["copy_ns"]),
                    copy_exposed_us=us(v["copy_exposed_ns"]),
                    idle_us=us(idle),
                    idle_foreign_us=us(v["idle_foreign_ns"]),
                    idle_sync_us=us(v["idle_sync_ns"]),
                    idle_other_cuda_us=us(v["idle_other_cuda_ns"]),
                    idle_outside_cuda_us=us(idle - named),
                    first_launch_us=us(v["first_launch_ns"]),
                    records=int(v["records"]),
                )
            )
    return rows


def nearest_rank(values: Sequence[int], q: float) -> int:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def rank_rows(got: Got) -> list[RankRow]:
    rows = []
    for (process, device), group in _group(_raw(got)).items():
        job, task, host, gpu = _identity(got, process, device)
        durations = [int(r.values["duration_ns"]) for r in group]
        flags = warmup_flags(durations)
        steady = [d for d, w in zip(durations, flags, strict=True) if not w] or durations

        def total(key: str, rows_: Sequence[_Raw] = group) -> int:
            return sum(int(r.values[key]) for r in rows_)

        span = total("duration_ns")
        comm, exposed = total("comm_ns"), total("comm_exposed_ns")
        idle = sum(_idle(r.values) for r in group)
        named = total("idle_foreign_ns") + total("idle_sync_ns") + total("idle_other_cuda_ns")
        rows.append(
            RankRow(
                job=job,
                task=task,
                host=host,
                gpu=gpu,
                source=str(group[0].values["source"]),
                steps=len(group),
                steady_steps=len(durations) - sum(flags),
                warmup_steps=[
                    int(r.values["step"]) for r, w in zip(group, flags, strict=True) if w
                ],
                step_p50_us=us(nearest_rank(steady, 0.5)),
                step_p95_us=us(nearest_rank(steady, 0.95)),
                step_max_us=us(max(steady)),
                compute_pct=pct(total("compute_ns"), span),
                comm_pct=pct(comm, span),
                comm_exposed_pct=pct(exposed, span),
                overlap_pct=pct(comm - exposed, comm) if comm else None,
                non_compute_pct=pct(exposed + total("copy_exposed_ns"), span),
                idle_pct=pct(idle, span),
                idle_foreign_pct=pct(total("idle_foreign_ns"), span),
                idle_sync_pct=pct(total("idle_sync_ns"), span),
                idle_other_cuda_pct=pct(total("idle_other_cuda_ns"), span),
                idle_outside_cuda_pct=pct(idle - named, span),
            )
        )
    rows.sort(key=lambda r: (r.job, _task_key(r.task), r.gpu))
    return rows


def _task_key(task: str) -> tuple[int, str]:
    return (int(task), "") if task.isdigit() else (1 << 62, task)


@dataclass(frozen=True)
class StepsNeed:
    def queries(self) -> Sequence[Query]:
        return (STEPS_QUERY,)

    def sweeps(self) -> Sequence[Sweep[Any]]:
        return ()

    def build(self, got: Got) -> list[StepRow]:
        rows = step_rows(got)
        rows.sort(key=lambda r: (r.job, r.start_ns, _task_key(r.task), r.gpu))
        return rows


@dataclass(frozen=True)
class RanksNeed:
    def queries(self) -> Sequence[Query]:
        return (STEPS_QUERY,)

    def sweeps(self) -> Sequence[Sweep[Any]]:
        return ()

    def build(self, got: Got) -> list[RankRow]:
        return rank_rows(got)
