"""The ``op`` view: per op (the host range a GPU record ran for: a framework op, an NVTX
range, an annotation; attributed by ``collector.attribution``), how often it ran, the
GPU time and kernels it caused and the CPU time spent launching them; tfprof's
``op -select micros -order_by micros``.

A GPU record counts for the innermost range open on its launching thread (else the
range with its External id, else its TF node's op), so an op's GPU time is its own,
not its children's; the ``scope`` view adds children up.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tfprof.collector.analysis.records import GPU_KINDS, RecordSet
from tfprof.collector.analysis.units import pct, us
from tfprof.core.records import RecordKind

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
    """Per names id: what ``op_rows`` reports, before rounding (``scopes`` reads it)."""

    count: np.ndarray
    gpu_ns: np.ndarray
    kernels: np.ndarray
    launch_ns: np.ndarray
    host_ns: np.ndarray

    def used(self) -> np.ndarray:
        """The names ids that are ops: ranges seen or GPU work attributed."""
        return np.flatnonzero((self.count > 0) | (self.gpu_ns > 0) | (self.kernels > 0))


def host_ranges(rs: RecordSet) -> np.ndarray:
    """Rows of ``rs.host`` that are ranges on a host thread (what ops are made of)."""
    h = rs.host
    return np.flatnonzero((h.kind == RecordKind.MARKER) & (h.thread != 0))


def op_totals(rs: RecordSet) -> OpTotals:
    n = len(rs.names)
    h = rs.host
    ranges = host_ranges(rs)
    count = np.bincount(h.name[ranges], minlength=n)
    host = np.bincount(h.name[ranges], weights=h.duration[ranges], minlength=n)
    work = np.flatnonzero(rs.mask(*GPU_KINDS) & (rs.op >= 0))
    op = rs.op[work]
    gpu = np.bincount(op, weights=rs.duration[work], minlength=n)
    kernels = np.bincount(op[rs.kind[work] == RecordKind.KERNEL], minlength=n)
    # A call that launched several records (a graph launch) counts once per op.
    linked = rs.api[work] >= 0
    pairs = np.unique(np.stack([op[linked], rs.api[work][linked]], axis=1), axis=0)
    launch = np.bincount(pairs[:, 0], weights=h.duration[pairs[:, 1]], minlength=n)
    return OpTotals(count, gpu, kernels, launch, host)


def op_rows(rs: RecordSet) -> list[OpRow]:
    t = op_totals(rs)
    all_gpu = float(rs.duration[rs.mask(*GPU_KINDS)].sum())
    rows = [
        OpRow(
            op=rs.names[i],
            count=int(t.count[i]),
            gpu_us=us(t.gpu_ns[i]),
            kernels=int(t.kernels[i]),
            launch_us=us(t.launch_ns[i]),
            host_us=us(t.host_ns[i]),
            gpu_time_pct=pct(t.gpu_ns[i], all_gpu),
        )
        for i in t.used().tolist()
    ]
    rows.sort(key=lambda r: (-r.gpu_us, -r.host_us, r.op))
    return rows


def op_notes(rs: RecordSet) -> tuple[str, ...]:
    """Why the view is empty, and how much GPU work ran for no op."""
    if host_ranges(rs).shape[0] == 0:
        return (NO_RANGES,)
    work = rs.mask(*GPU_KINDS)
    lost = work & (rs.op < 0)
    if not lost.any():
        return ()
    return (
        f"{int(lost.sum()):,} of {int(work.sum()):,} GPU records "
        f"({us(rs.duration[lost].sum()):,.1f} us) ran for no op: no range was open on the "
        "launching thread, and none carried their External id or TF node",
    )
