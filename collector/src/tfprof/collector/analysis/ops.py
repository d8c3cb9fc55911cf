"""The ``op`` view: per op (the host range a GPU record ran for: a framework op, an NVTX
range, an annotation; attributed by ``timeline.attribution``'s rules), how often it
ran, the GPU time and kernels it caused and the CPU time spent launching them;
tfprof's ``op -select micros -order_by micros``.

A GPU record counts for the innermost range open on its launching thread (else the
range with its External id, else its TF node's op), so an op's GPU time is its own,
not its children's; the ``scope`` view adds children up.

``OpsNeed`` reads it through the read engine: the ranges' counts and times by SQL, what
ran for each op from one sweep (``read.launch_totals``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tfprof.collector.analysis.units import pct, us
from tfprof.collector.analysis.view_rows import ViewRows
from tfprof.collector.read.launch_totals import LaunchFigures, LaunchTotals
from tfprof.collector.read.needs import Got, Query, Sweep
from tfprof.collector.timeline.attribution import TF_OP_CATEGORY

NAME_FIELD = "op"
TIME_FIELD = "gpu_us"
NO_RANGES = (
    "no op ranges: the trace has no framework op, NVTX or annotation ranges (with "
    "--source cupti: --nvtx on and a framework that emits them, or --torch-ops on)"
)


@dataclass(frozen=True)
class OpRow:
    op: str
    count: int  # ranges of this name on host threads in the window
    gpu_us: float  # kernels, copies and memsets attributed to it
    kernels: int
    launch_us: float  # CPU time in the API calls that launched them (each call once)
    host_us: float  # the ranges' own time on their threads (wall time, children included)
    gpu_time_pct: float  # of all kernel, copy and memset time in the window


@dataclass(frozen=True)
class OpTotals:
    """Per op name: what ``op_rows`` reports, before rounding (``scopes`` reads it), for
    the names that are ops: ranges seen or GPU work attributed. ``tf_ops``: the names of
    TensorFlow ``tf_op`` ranges; ``all_gpu_ns``: every kernel, copy and memset's time;
    ``ranges``: host ranges seen; ``work``/``lost``/``lost_ns``: GPU records and those
    attributed to no op."""

    ops: dict[str, tuple[int, int, int, int, int]]  # count, gpu, kernels, launch, host ns
    tf_ops: frozenset[str]
    all_gpu_ns: int
    ranges: int
    work: int
    lost: int
    lost_ns: int


# Host ranges (on a thread) per name: count and time; TensorFlow's tf_op names; and every
# kernel, copy and memset's time.
RANGES = Query(
    "SELECT coalesce(name, ''), count(*), sum(d) FROM {h} WHERE kind = 6 AND thread <> 0 "
    "GROUP BY ALL"
)
TF_OPS = Query(
    f"SELECT DISTINCT coalesce(name, '') FROM {{h}} WHERE kind = 6 AND domain = '{TF_OP_CATEGORY}'"
)
GPU_TIME = Query("SELECT count(*), coalesce(sum(d), 0) FROM {g} WHERE kind <= 3")


def op_totals_of(got: Got) -> OpTotals:
    """``OpTotals`` of a read (``OpsNeed``'s and ``ScopesNeed``'s pieces)."""
    f: LaunchFigures = got.swept(LaunchTotals())
    ops: dict[str, list[int]] = {}
    for name, count, host in got.rows(RANGES):
        ops[name] = [int(count), 0, 0, 0, int(host)]
    for i in np.flatnonzero((f.op_gpu_ns > 0) | (f.op_kernels > 0)).tolist():
        row = ops.setdefault(f.names[i], [0, 0, 0, 0, 0])
        row[1:4] = int(f.op_gpu_ns[i]), int(f.op_kernels[i]), int(f.op_launch_ns[i])
    ((_, all_gpu),) = got.rows(GPU_TIME)
    return OpTotals(
        {k: (v[0], v[1], v[2], v[3], v[4]) for k, v in ops.items()},
        frozenset(r[0] for r in got.rows(TF_OPS)),
        int(all_gpu),
        sum(int(r[1]) for r in got.rows(RANGES)),
        f.work_records,
        f.lost_records,
        f.lost_ns,
    )


def rows_of(t: OpTotals) -> list[OpRow]:
    rows = [
        OpRow(
            op=name,
            count=count,
            gpu_us=us(gpu),
            kernels=kernels,
            launch_us=us(launch),
            host_us=us(host),
            gpu_time_pct=pct(gpu, float(t.all_gpu_ns)),
        )
        for name, (count, gpu, kernels, launch, host) in t.ops.items()
    ]
    rows.sort(key=lambda r: (-r.gpu_us, -r.host_us, r.op))
    return rows


def notes_of(t: OpTotals) -> tuple[str, ...]:
    """Why the view is empty, and how much GPU work ran for no op."""
    if not t.ranges:
        return (NO_RANGES,)
    if not t.lost:
        return ()
    return (
        f"{t.lost:,} of {t.work:,} GPU records ({us(t.lost_ns):,.1f} us) ran for no op: no "
        "range was open on the launching thread, and none carried their External id or "
        "TF node",
    )


@dataclass(frozen=True)
class OpsNeed:
    def queries(self) -> Sequence[Query]:
        return (RANGES, TF_OPS, GPU_TIME)

    def sweeps(self) -> Sequence[Sweep[Any]]:
        return (LaunchTotals(),)

    def build(self, got: Got) -> ViewRows:
        t = op_totals_of(got)
        return ViewRows(rows_of(t), notes_of(t))
