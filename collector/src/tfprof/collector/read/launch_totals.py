"""The host side of the GPU records, added up for the views and rules: per op (host range
name) the GPU time, kernels and launch CPU time it caused, and per kernel name the
queue depth its launches found (``LaunchTotals``, one sweep over ``HostLaunches``).

A call that launched several records (a graph launch) counts once per op: the (call,
op) pairs credited are carried while the call can still link a record.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tfprof.collector.read.engine import Read
from tfprof.collector.read.host_launches import (
    LAUNCH_COLUMNS,
    LAUNCH_QUERIES,
    LAUNCH_TABLES,
    HostLaunches,
)
from tfprof.collector.read.launch_links import LinkCounts, isin_sorted
from tfprof.collector.read.needs import Query
from tfprof.collector.read.time_chunks import Chunk

KERNEL, SYNC = 1, 4
_OP_BITS = 31  # names ids below 2^31: a (call, op) pair is one int64


@dataclass(frozen=True)
class LaunchFigures:
    """Arrays indexed by names id (``names``): what ran for each op, and the queue
    depth each kernel name's linked launches found."""

    names: tuple[str, ...]
    op_gpu_ns: np.ndarray  # kernels, copies and memsets attributed to the op
    op_kernels: np.ndarray
    op_launch_ns: np.ndarray  # the calls that launched them, each once per op
    queue_count: np.ndarray  # linked kernels of the name
    queue_sum: np.ndarray
    queue_max: np.ndarray
    work_records: int  # kernels, copies, memsets in the window
    lost_records: int  # of those, attributed to no op
    lost_ns: int
    links: LinkCounts
    how: dict[str, int]


@dataclass(frozen=True)
class LaunchTotals:
    """Sweep: ``LaunchFigures`` of the read."""

    tables: frozenset[str] = LAUNCH_TABLES
    columns: frozenset[str] = LAUNCH_COLUMNS
    queries: tuple[Query, ...] = LAUNCH_QUERIES

    def start(self, read: Read) -> _LaunchTotalsState:
        return _LaunchTotalsState(read)


class _Sums:
    """Columns indexed by names id, grown as names are interned."""

    def __init__(self, columns: tuple[str, ...]) -> None:
        self.v = {c: np.zeros(0, dtype=np.int64) for c in columns}

    def add(self, column: str, ids: np.ndarray, values: Any = None, top: int = 0) -> None:
        n = max(top, int(ids.max()) + 1 if ids.shape[0] else 0)
        self.grow(n)
        if ids.shape[0]:
            self.v[column][:n] += np.bincount(ids, weights=values, minlength=n).astype(np.int64)

    def grow(self, n: int) -> None:
        for c, v in self.v.items():
            if v.shape[0] < n:
                self.v[c] = np.concatenate([v, np.zeros(n - v.shape[0], dtype=np.int64)])


class _LaunchTotalsState:
    def __init__(self, read: Read) -> None:
        self.read = read
        self.host = HostLaunches(read)
        self.sums = _Sums(("gpu", "kernels", "launch", "q_count", "q_sum", "q_max"))
        self.credited = np.zeros(0, dtype=np.int64)  # (call, op) codes, sorted
        self.work = self.lost = self.lost_ns = 0

    def feed(self, chunk: Chunk) -> None:
        fed = self.host.feed(chunk)
        if fed is None:
            self._forget(chunk.bound)
            return
        settled, h = fed
        kind = settled["kind"][h.rows]
        duration = (settled["e"] - settled["s"])[h.rows]
        work = kind != SYNC
        self.work += int(np.count_nonzero(work))
        lost = work & (h.op < 0)
        self.lost += int(np.count_nonzero(lost))
        self.lost_ns += int(duration[lost].sum())
        mine = np.flatnonzero(work & (h.op >= 0))
        op = h.op[mine]
        self.sums.add("gpu", op, duration[mine])
        self.sums.add("kernels", op[kind[mine] == KERNEL])
        linked = mine[h.call[mine] >= 0]
        if linked.shape[0]:
            code = (h.call[linked] << _OP_BITS) | h.op[linked]
            codes, first = np.unique(code, return_index=True)
            fresh = ~isin_sorted(codes, self.credited)
            self.credited = np.union1d(self.credited, codes[fresh])
            once = linked[first[fresh]]  # a row of each (call, op) not credited before
            self.sums.add("launch", h.op[once], h.call_duration[once])
        k = np.flatnonzero((kind == KERNEL) & (h.call >= 0))
        if k.shape[0]:
            name = settled["name"][h.rows[k]]
            self.sums.add("q_count", name)
            self.sums.add("q_sum", name, h.queue[k])
            top = self.sums.v["q_max"]
            np.maximum.at(top, name, h.queue[k])
        self._forget(chunk.bound)

    def _forget(self, bound: int) -> None:
        """(call, op) pairs of calls no record can link to any more."""
        book = self.host.links.book
        oldest = book.oldest("serial") if book.size else None
        if oldest is None:
            self.credited = self.credited[:0]
        elif self.credited.shape[0]:
            self.credited = self.credited[(self.credited >> _OP_BITS) >= oldest]

    def finish(self) -> LaunchFigures:
        names = self.read.names.names
        self.sums.grow(len(names))
        v = self.sums.v
        return LaunchFigures(
            names=names,
            op_gpu_ns=v["gpu"],
            op_kernels=v["kernels"],
            op_launch_ns=v["launch"],
            queue_count=v["q_count"],
            queue_sum=v["q_sum"],
            queue_max=v["q_max"],
            work_records=self.work,
            lost_records=self.lost,
            lost_ns=self.lost_ns,
            links=self.host.link_counts(),
            how=self.host.how.counts(),
        )
