"""The ``collectives`` view: per job, process group and collective type, the calls, bytes
where Kineto's args give them, kernel time, exposed time (no compute kernel running on
the same GPU), the algorithm the kernel names say, and bandwidths as nccl-tests defines
them: algbw = bytes / time, busbw = algbw x (2(n-1)/n all-reduce; (n-1)/n all-gather,
reduce-scatter, all-to-all; 1 broadcast, reduce, send/recv).

Time is each rank's own kernel time, waiting for the other ranks included, so the
bandwidths are lower bounds (the ``stragglers`` figures say how much was waiting).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tfprof.collector.analysis.comm_kernels import parse
from tfprof.collector.analysis.units import pct, us
from tfprof.collector.lake.collective_sql import GROUP_COLUMNS, GROUPS
from tfprof.collector.lake.dist_sql import ENGINE
from tfprof.collector.read.needs import Got, Query, Sweep

GROUPS_QUERY = Query(ENGINE.bind(GROUPS), gather="calls_out")
NAME_FIELD = "collective"
TIME_FIELD = "time_us"
BUS_FACTOR: dict[str, Callable[[int], float]] = {
    "allreduce": lambda n: 2 * (n - 1) / n,
    "reducescatter": lambda n: (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "sendrecv": lambda n: 1.0,
}


@dataclass(frozen=True)
class CollectiveRow:
    job: str
    group: str  # process group name (Kineto's), else stream:<CUDA stream>
    collective: str  # allreduce, allgather, reducescatter, alltoall, broadcast, sendrecv...
    calls: int  # kernels, over every rank
    ranks: int
    time_us: float
    exposed_us: float  # under no compute kernel of the same GPU
    exposed_pct: float
    bytes: int | None  # where the args give element count and type
    group_size: int | None
    algbw_gbps: float | None  # bytes / time of the calls with a size
    busbw_gbps: float | None
    algorithm: str  # from the kernel names: RING, TREE, "not TREE" (NCCL >= 2.19)...
    source: list[str] = field(default_factory=list)  # args, annotation, name: calls each


def collective_rows(got: Got) -> list[CollectiveRow]:
    merged: dict[tuple[int, str, str], dict[str, Any]] = {}
    for row in got.rows(GROUPS_QUERY):
        v = dict(zip(GROUP_COLUMNS, row, strict=True))
        key = (int(v["jb"]), str(v["pg"]), str(v["ctype"]))
        m = merged.setdefault(key, {"calls": 0, "ns": 0, "exposed_ns": 0, "sized": 0,
                                    "bytes": 0, "sized_ns": 0, "group_size": None,
                                    "ranks": 0, "algos": set(), "sources": {}})  # fmt: skip
        for k in ("calls", "ns", "exposed_ns", "sized", "sized_ns"):
            m[k] += int(v[k])
        m["bytes"] += int(v["bytes"] or 0)
        m["ranks"] = max(m["ranks"], int(v["ranks"]))
        if v["group_size"] is not None:
            m["group_size"] = max(m["group_size"] or 0, int(v["group_size"]))
        kernel = parse(str(v["name"] or ""))
        if kernel is not None and kernel.algorithm:
            m["algos"].add(kernel.algorithm)
        m["sources"][v["source"]] = m["sources"].get(v["source"], 0) + int(v["calls"])
    jobs = got.read.jobs
    rows = []
    for (job, group, ctype), m in merged.items():
        algbw = busbw = None
        if m["sized"] and m["sized_ns"]:
            algbw = round(m["bytes"] / m["sized_ns"], 3)  # bytes per ns is GB/s
            n = m["group_size"]
            if n and ctype in BUS_FACTOR:
                busbw = round(algbw * BUS_FACTOR[ctype](n), 3)
        rows.append(
            CollectiveRow(
                job=jobs[job].label,
                group=group,
                collective=ctype,
                calls=m["calls"],
                ranks=m["ranks"],
                time_us=us(m["ns"]),
                exposed_us=us(m["exposed_ns"]),
                exposed_pct=pct(m["exposed_ns"], m["ns"]),
                bytes=m["bytes"] if m["sized"] else None,
                group_size=m["group_size"],
                algbw_gbps=algbw,
                busbw_gbps=busbw,
                algorithm="/".join(sorted(m["algos"])),
                source=[f"{s} {n}" for s, n in sorted(m["sources"].items())],
            )
        )
    rows.sort(key=lambda r: (r.job, -r.time_us, r.group, r.collective))
    return rows


@dataclass(frozen=True)
class CollectivesNeed:
    def queries(self) -> Sequence[Query]:
        return (GROUPS_QUERY,)

    def sweeps(self) -> Sequence[Sweep[Any]]:
        return ()

    def build(self, got: Got) -> list[CollectiveRow]:
        return collective_rows(got)
