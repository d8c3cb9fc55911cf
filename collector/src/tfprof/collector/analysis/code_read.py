"""Read attributed Python stacks from the lake (code_sql.py) into leaves for the code
views, flame graphs and the memory-by-line view: one row per (stream, stack) from DuckDB,
each stack's frames resolved once."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import duckdb

from tfprof.collector.analysis import code_sql
from tfprof.collector.analysis.code_sql import KEY, Nodes, Scope
from tfprof.collector.analysis.code_tree import (
    BYTES,
    GPU_NS,
    HOST_NS,
    KERNELS,
    LAUNCHES,
    NEAR_NS,
    RECORDS,
    WIDTH,
    Leaf,
    frame_name,
)

StreamKey = tuple[str, str, str]  # job, run, stream_id


@dataclass
class HowCount:
    records: int = 0
    ns: int = 0
    bytes: int = 0


@dataclass
class Attribution:
    """Leaves (with their job and task), the frames their names stand for, and how the
    GPU records found their stacks."""

    leaves: list[Leaf] = field(default_factory=list)
    groups: list[tuple[str, str]] = field(default_factory=list)  # per leaf: (job, task)
    frames: dict[str, tuple[str, int, str]] = field(default_factory=dict)  # name -> parts
    how: dict[int, HowCount] = field(default_factory=dict)
    gap_sum: int = 0  # ns from nearest samples to their calls
    gap_max: int = 0
    host_samples: int = 0
    host_threads: int = 0
    jobs: list[str] = field(default_factory=list)
    start_ns: int = 0
    end_ns: int = 0


class Paths:
    """Stack id -> frame names, outermost first (memoised per stream)."""

    def __init__(self, nodes: Nodes, frames: dict[str, tuple[str, int, str]]) -> None:
        self.nodes = nodes.rows
        self.frames = frames
        self.memo: dict[tuple[str, str, str, int], tuple[str, ...]] = {}

    def path(self, key: StreamKey, stack_id: int | None) -> tuple[str, ...]:
        if stack_id is None:
            return ()
        chain: list[tuple[str, str, str, int]] = []
        at = (*key, stack_id)
        while at[3] and at not in self.memo and at in self.nodes and len(chain) < 10_000:
            chain.append(at)
            at = (*key, self.nodes[at][0])
        base = self.memo.get(at, ())
        for node in reversed(chain):
            _, file, line, function = self.nodes[node]
            name = frame_name(file, line, function)
            self.frames.setdefault(name, (file, line, function))
            base = self.memo[node] = (*base, name)
        return base


def read(con: duckdb.DuckDBPyConnection, scope: Scope, records: str = "") -> Attribution:
    """Attributed GPU work and host samples of ``scope``; with ``records`` (a relation as
    ``code_sql.by_stack`` takes), those instead of GPU work, and no host time."""
    con.execute(
        "CREATE OR REPLACE TEMP TABLE code_gpu AS "
        + code_sql.by_stack(records or code_sql.gpu_records(scope))
    )
    leaves = f"SELECT {KEY}, stack_id FROM code_gpu WHERE stack_id IS NOT NULL"
    if not records:
        con.execute(f"CREATE OR REPLACE TEMP TABLE code_host AS {code_sql.host_by_stack(scope)}")
        leaves += f" UNION SELECT {KEY}, stack_id FROM code_host"
    out = Attribution()
    paths = Paths(code_sql.ancestors(con, leaves), out.frames)
    gpu = con.execute(
        "SELECT job, run, CAST(stream_id AS VARCHAR), CAST(task AS VARCHAR), stack_id, how, "
        "records, ns, kernels, launches, bytes, gap_sum, gap_max FROM code_gpu"
    ).fetchall()
    for job, run, stream, task, stack, how, n, ns, kernels, launches, nbytes, gaps, gap in gpu:
        values = [0.0] * WIDTH
        values[GPU_NS] = float(ns or 0)
        values[KERNELS] = float(kernels or 0)
        values[LAUNCHES] = float(launches or 0)
        values[BYTES] = float(nbytes or 0)
        values[RECORDS] = float(n)
        if how == code_sql.NEAREST:
            values[NEAR_NS] = values[BYTES] if records else values[GPU_NS]
            out.gap_sum += int(gaps or 0)
            out.gap_max = max(out.gap_max, int(gap or 0))
        count = out.how.setdefault(int(how), HowCount())
        count.records += int(n)
        count.ns += int(ns or 0)
        count.bytes += int(nbytes or 0)
        path = paths.path((job, run, stream), None if stack is None else int(stack))
        out.leaves.append(Leaf(path, values))
        out.groups.append((job, task or ""))
    if not records:
        host = con.execute(
            "SELECT job, run, CAST(stream_id AS VARCHAR), CAST(task AS VARCHAR), stack_id, ns, "
            "samples FROM code_host"
        ).fetchall()
        for job, run, stream, task, stack, ns, samples in host:
            values = [0.0] * WIDTH
            values[HOST_NS] = float(ns or 0)
            out.host_samples += int(samples or 0)
            out.leaves.append(Leaf(paths.path((job, run, stream), int(stack)), values))
            out.groups.append((job, task or ""))
        row = con.execute(
            f"SELECT count(*) FROM (SELECT DISTINCT {KEY}, thread FROM stack_samples "
            f"WHERE kind = 1 AND {scope.where('time_ns', None)})"
        ).fetchone()
        out.host_threads = int(row[0]) if row else 0
    _window(con, scope, out)
    return out


def _window(con: duckdb.DuckDBPyConnection, scope: Scope, out: Attribution) -> None:
    spans = " UNION ALL ".join(
        f"SELECT job, start_ns AS s, start_ns + duration_ns AS e FROM {t} WHERE {scope.where()}"
        for t in ("kernels", "copies", "memsets")
    )
    samples = (
        f"SELECT job, time_ns AS s, time_ns AS e FROM stack_samples "
        f"WHERE {scope.where('time_ns', None)}"
    )
    row = con.execute(
        f"SELECT list(DISTINCT job ORDER BY job), min(s), max(e) FROM ({spans} UNION ALL {samples})"
    ).fetchone()
    jobs, start, end = row if row else ([], None, None)
    out.jobs = list(jobs or [])
    out.start_ns = int(scope.since_ns if scope.since_ns is not None else start or 0)
    out.end_ns = int(scope.until_ns if scope.until_ns is not None else end or 0)


def by_group(att: Attribution) -> Iterator[tuple[tuple[str, str], list[Leaf]]]:
    """The leaves of each (job, task), in job then task order."""
    groups: dict[tuple[str, str], list[Leaf]] = {}
    for group, leaf in zip(att.groups, att.leaves, strict=True):
        groups.setdefault(group, []).append(leaf)
    for group in sorted(groups, key=lambda g: (g[0], _task_order(g[1]))):
        yield group, groups[group]


def _task_order(task: str) -> tuple[int, int | str]:
    return (0, int(task)) if task.isdigit() else (1, task)
