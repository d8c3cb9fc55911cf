"""The timeline's chunks settled and in timeline order, with their GPU records' launch
flows and ops.

Each GPU record's call and op come from the read's host pieces
(``read.host_launches.HostLaunches``: the call carrying its correlation id in its
process, the host range it ran for), which settle the engine's chunks (no instant split
between two) and answer for every GPU record as its chunk comes.

A flow goes from the call's slice to the record's. A call's slice names the flows it
starts (Perfetto writes their ids on the call's own packet), but its records come later
than the call, in later chunks maybe: so the first pass counts, per call, the records
that link to it (``CallFlows``: a byte per call), and the second numbers each call's
flows as the call comes (ids from 1, in the order calls come; a graph launch's several
records take consecutive ids) and hands each record its call's next id
(``HostLinks``). Both passes read the same chunks, so calls are numbered alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tfprof.collector.merged.track_rows import timeline_order
from tfprof.collector.read.engine import Read
from tfprof.collector.read.host_launches import LAUNCH_QUERIES, ChunkLaunches, HostLaunches
from tfprof.collector.read.launch_links import AMBIGUOUS_CALLS, isin_sorted, keys_of, link_key
from tfprof.collector.read.settled_chunks import Settled
from tfprof.collector.read.time_chunks import Chunk, Columns
from tfprof.collector.timeline.model import FlowMarks, SliceTrack
from tfprof.core.records import RecordKind
from tfprof.core.tracks import TrackKind

HOST_QUERIES = LAUNCH_QUERIES
_WIDE = 255  # a call's flow count held in its byte up to this; more in a dict


class Settle:
    """A component's chunks, fed in order, as settled rows in timeline order and, when
    the read has API calls or ranges (``host``), their GPU records' host side."""

    def __init__(self, read: Read, host: bool) -> None:
        self.launches = HostLaunches(read) if host else None
        self.settled = Settled()

    def feed(self, chunk: Chunk) -> tuple[Columns, ChunkLaunches | None] | None:
        found: ChunkLaunches | None = None
        if self.launches is not None:
            got = self.launches.feed(chunk)
            if got is None:
                return None
            settled, found = got
        else:
            ready = self.settled.feed(chunk)
            if ready is None:
                return None
            settled = ready
        cols = settled.columns
        order = timeline_order(cols)
        if order is None:
            return cols, found
        cols = {c: v[order] for c, v in cols.items()}
        if found is not None:  # its rows index the chunk as it was settled
            at = np.empty(order.shape[0], dtype=np.int64)
            at[order] = np.arange(order.shape[0])
            found = replace(found, rows=at[found.rows])
        return cols, found


class CallFlows:
    """Per call (numbered as calls come), how many GPU records link to it."""

    def __init__(self) -> None:
        self._counts = np.zeros(0, dtype=np.uint8)
        self._wide: dict[int, int] = {}

    def add(self, found: ChunkLaunches | None) -> None:
        if found is None:
            return
        calls = found.call[found.call >= 0]
        if not calls.shape[0]:
            return
        top = int(calls.max()) + 1
        if top > self._counts.shape[0]:
            grown = np.zeros(max(top, 2 * self._counts.shape[0]), dtype=np.uint8)
            grown[: self._counts.shape[0]] = self._counts
            self._counts = grown
        serial, times = np.unique(calls, return_counts=True)
        total = self._counts[serial].astype(np.int64) + times
        for s, n in zip(serial[total >= _WIDE].tolist(), total[total >= _WIDE].tolist(),
                        strict=True):  # fmt: skip
            self._wide[s] = self._wide.get(s, _WIDE) + n - _WIDE
        self._counts[serial] = np.minimum(total, _WIDE)

    def of(self, serial: np.ndarray) -> np.ndarray:
        """The flow count of each call ``serial``."""
        inside = serial < self._counts.shape[0]
        counts = np.zeros(serial.shape[0], dtype=np.int64)
        counts[inside] = self._counts[serial[inside]]
        for i in np.flatnonzero(counts == _WIDE).tolist():
            counts[i] = self._wide[int(serial[i])]
        return counts


@dataclass(frozen=True)
class ChunkLinks:
    """A part's flow ends and each slice track's ops."""

    starts: FlowMarks
    ends: FlowMarks
    ops: Sequence[np.ndarray | None]  # per slice track of the part

    def with_ops(self, index: int, track: SliceTrack) -> SliceTrack:
        ops = self.ops[index]
        return track if ops is None else replace(track, op_id=ops)


@dataclass
class _TaskCounts:
    links: np.ndarray  # linked, unknown, missing, ambiguous
    how: np.ndarray  # HOW_* counts


class HostLinks:
    """Flow ids and ops of a part's slices (the second pass), and the counts per task
    (the metadata's ``host_side``)."""

    def __init__(self, read: Read, flows: CallFlows, task_of: np.ndarray,
                 tasks: Sequence[tuple[str, str]], counted: Sequence[bool]) -> None:  # fmt: skip
        self.flows = flows
        self.task_of = task_of  # per process
        self.tasks = tasks  # (job label, task label)
        self.counted = counted  # per task: has slices (its links are counted)
        self.groups = np.asarray(read.cat.link_groups, dtype=np.int64)
        known = AMBIGUOUS_CALLS in read.query_rows  # a read without API calls has none
        self.ambiguous = keys_of(read.rows(AMBIGUOUS_CALLS) if known else [])
        self._calls = 0  # calls met so far
        self._next_id = 1
        # Calls whose records are still to come: serial, first id, ids handed out, flows.
        self._waiting = (np.zeros(0, np.int64),) * 4
        self._counts = _TaskCounts(np.zeros((len(tasks), 4), np.int64),
                                   np.zeros((len(tasks), 4), np.int64))  # fmt: skip

    def chunk(self, cols: Columns, found: ChunkLaunches | None,
              tracks: Sequence[tuple[np.ndarray, TrackKind]]) -> ChunkLinks:  # fmt: skip
        """The flows and ops of a part whose slice tracks hold the rows ``tracks`` (each
        with its track's kind)."""
        n = cols["kind"].shape[0]
        part_track = np.full(n, -1, dtype=np.int64)
        part_slice = np.full(n, -1, dtype=np.int64)
        for i, (idx, kind) in enumerate(tracks):
            if kind is not TrackKind.MEMCPY:  # a copy's flow goes to its stream's slice
                part_track[idx] = i
                part_slice[idx] = np.arange(idx.shape[0])
        starts = self._starts(cols, part_track, part_slice)
        op = np.full(n, -1, dtype=np.int64)
        ends = FlowMarks.empty()
        if found is not None:
            op[found.rows] = found.op
            ends = self._ends(found, part_track, part_slice)
            self._count(cols, found)
        else:  # nothing to link to: each GPU record unlinked (as unknown or missing)
            self._count(cols, _unlinked(cols))
        ops: list[np.ndarray | None] = []
        for idx, kind in tracks:
            if kind is TrackKind.THREAD:
                ops.append(None)
            elif kind is TrackKind.MEMCPY:  # ops go on the stream's slices only
                ops.append(np.full(idx.shape[0], -1, dtype=np.int64))
            else:
                ops.append(op[idx])
        return ChunkLinks(starts, ends, ops)

    def _starts(self, cols: Columns, part_track: np.ndarray, part_slice: np.ndarray) -> FlowMarks:
        calls = np.flatnonzero(cols["kind"] == RecordKind.API)
        if not calls.shape[0]:
            return FlowMarks.empty()
        serial = self._calls + np.arange(calls.shape[0], dtype=np.int64)
        self._calls += calls.shape[0]
        counts = self.flows.of(serial)
        some = counts > 0
        if not some.any():
            return FlowMarks.empty()
        calls, serial, counts = calls[some], serial[some], counts[some]
        first = self._next_id + np.concatenate([[0], np.cumsum(counts)[:-1]])
        self._next_id += int(counts.sum())
        w_serial, w_first, w_used, w_count = self._waiting
        self._waiting = (np.concatenate([w_serial, serial]), np.concatenate([w_first, first]),
                         np.concatenate([w_used, np.zeros_like(serial)]),
                         np.concatenate([w_count, counts]))  # fmt: skip
        rows = np.repeat(calls, counts)
        ids = np.repeat(first, counts) + _ranks(np.repeat(np.arange(calls.shape[0]), counts))
        return FlowMarks(part_track[rows], part_slice[rows], ids)

    def _ends(self, found: ChunkLaunches, part_track: np.ndarray,
              part_slice: np.ndarray) -> FlowMarks:  # fmt: skip
        linked = found.call >= 0
        if not linked.any():
            return FlowMarks.empty()
        rows, serial = found.rows[linked], found.call[linked]
        w_serial, w_first, w_used, w_count = self._waiting
        at = np.searchsorted(w_serial, serial)
        ids = w_first[at] + w_used[at] + _ranks(at)
        np.add.at(w_used, at, 1)
        done = w_used >= w_count
        if done.any():
            keep = ~done
            self._waiting = (w_serial[keep], w_first[keep], w_used[keep], w_count[keep])
        return FlowMarks(part_track[rows], part_slice[rows], ids)

    def _count(self, cols: Columns, found: ChunkLaunches) -> None:
        process = cols["process"][found.rows]
        task = self.task_of[process]
        correlation = cols["correlation"][found.rows]
        linked = found.call >= 0
        unknown = ~linked & (correlation == 0)
        key = link_key(self.groups[process], correlation)
        ambiguous = ~linked & ~unknown & isin_sorted(key, self.ambiguous)
        missing = ~(linked | unknown | ambiguous)
        for column, which in enumerate((linked, unknown, missing, ambiguous)):
            self._counts.links[:, column] += np.bincount(task[which], minlength=len(self.tasks))
        code = task * 4 + found.how
        self._counts.how += np.bincount(code, minlength=4 * len(self.tasks)).reshape(-1, 4)

    def metadata(self) -> dict[str, Any]:
        """``host_side``'s flows: per task with slices, and in total."""
        tasks = []
        total: dict[str, int] = {}
        for t, (job, task) in enumerate(self.tasks):
            if not self.counted[t]:
                continue
            linked, unknown, missing, ambiguous = self._counts.links[t].tolist()
            none, launch, external, node = self._counts.how[t].tolist()
            stats = {"linked": linked, "unknown_correlation": unknown, "missing_api": missing,
                     "ambiguous_api": ambiguous, "by_launch": launch,
                     "by_external_id": external, "by_node_name": node,
                     "unattributed": none}  # fmt: skip
            tasks.append({"job": job, "task": task, **stats})
            for k, v in stats.items():
                total[k] = total.get(k, 0) + v
        return {"flows": total, "tasks": tasks}


def _unlinked(cols: Columns) -> ChunkLaunches:
    """The host side of a chunk's GPU records when the read has no call or range."""
    rows = np.flatnonzero(cols["kind"] <= RecordKind.SYNC)
    none = np.full(rows.shape[0], -1, dtype=np.int64)
    zero = np.zeros(rows.shape[0], dtype=np.int64)
    return ChunkLaunches(rows, none, zero, zero, zero, none, zero, none)


def _ranks(group: np.ndarray) -> np.ndarray:
    """Each item's rank among the earlier items of its group (``group``: per item)."""
    order = np.argsort(group, kind="stable")
    ordered = group[order]
    first = np.searchsorted(ordered, ordered, side="left")
    ranks = np.empty(group.shape[0], dtype=np.int64)
    ranks[order] = np.arange(group.shape[0]) - first
    return ranks
