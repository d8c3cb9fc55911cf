"""The ``scope`` view: tfprof's name-scope tree. Op names split at ``/`` (TensorFlow's
``gradients/dense/MatMul_grad/MatMul``, NVTX ranges named by path); each node's self
time is that of the ops named exactly so, its total adds every op below it.

TensorFlow op ranges are named ``<node>:<op type>``; their scope is the node name.
Rows come depth first, children by total GPU time; ``--max-depth`` hides deeper rows
(their time stays in their ancestors' totals), as tfprof's ``-max_depth``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tfprof.collector.analysis.ops import OpsNeed, OpTotals, notes_of, op_totals_of
from tfprof.collector.analysis.units import us
from tfprof.collector.analysis.view_rows import ViewRows
from tfprof.collector.read.needs import Got, Query, Sweep

NAME_FIELD = "scope"
TIME_FIELD = "total_us"
DEPTH_FIELD = "depth"


@dataclass(frozen=True)
class ScopeRow:
    scope: str  # the path from the root, "/"-separated
    depth: int  # 1 for a top-level scope
    count: int  # ranges named exactly this scope
    self_us: float  # GPU time of ops named exactly this scope
    total_us: float  # GPU time of this scope and every scope below it
    kernels: int  # kernels of ops named exactly this scope
    total_kernels: int
    self_host_us: float  # the ranges' own time on their threads
    total_host_us: float


@dataclass
class _Node:
    count: int = 0
    self_ns: float = 0.0
    total_ns: float = 0.0
    kernels: int = 0
    total_kernels: int = 0
    self_host_ns: float = 0.0
    total_host_ns: float = 0.0


def scope_path(name: str, tf_op: bool) -> tuple[str, ...]:
    node = name.rpartition(":")[0] or name if tf_op else name
    return tuple(part for part in node.split("/") if part)


@dataclass(frozen=True)
class ScopesNeed:
    def queries(self) -> Sequence[Query]:
        return OpsNeed().queries()

    def sweeps(self) -> Sequence[Sweep[Any]]:
        return OpsNeed().sweeps()

    def build(self, got: Got) -> ViewRows:
        t = op_totals_of(got)
        return ViewRows(rows_of(t), notes_of(t))


def rows_of(t: OpTotals) -> list[ScopeRow]:
    nodes: dict[tuple[str, ...], _Node] = {}
    for name, (count, gpu, kernels, _, host) in t.ops.items():
        path = scope_path(name, name in t.tf_ops)
        if not path:
            continue
        own = nodes.setdefault(path, _Node())
        own.count += count
        own.self_ns += float(gpu)
        own.kernels += kernels
        own.self_host_ns += float(host)
        for depth in range(1, len(path) + 1):
            node = nodes.setdefault(path[:depth], _Node())
            node.total_ns += float(gpu)
            node.total_kernels += kernels
            node.total_host_ns += float(host)
    children: dict[tuple[str, ...], list[tuple[str, ...]]] = {}
    for path in nodes:
        children.setdefault(path[:-1], []).append(path)
    rows: list[ScopeRow] = []

    def visit(parent: tuple[str, ...]) -> None:
        kids = children.get(parent, [])
        kids.sort(key=lambda p: (-nodes[p].total_ns, -nodes[p].total_host_ns, p))
        for path in kids:
            n = nodes[path]
            rows.append(
                ScopeRow(
                    scope="/".join(path),
                    depth=len(path),
                    count=n.count,
                    self_us=us(n.self_ns),
                    total_us=us(n.total_ns),
                    kernels=n.kernels,
                    total_kernels=n.total_kernels,
                    self_host_us=us(n.self_host_ns),
                    total_host_us=us(n.total_host_ns),
                )
            )
            visit(path)

    visit(())
    return rows
