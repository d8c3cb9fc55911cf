"""What ties each GPU record to the host, with carried state, a chunk at a time: the API
call that launched it (``launch_links``), the host range it ran for (``op_ranges``) and
its stream's queue depth when it was launched (``launch_queues``).

``HostLaunches`` is the piece every reader of it shares: the views and rules through
the ``LaunchTotals`` sweep, an export (flows, op ids) by feeding it chunks itself. Its
``feed`` settles each chunk first (``settled_chunks``: no instant split between two)
and answers for the settled rows: per GPU record (kernels, copies, memsets, syncs)
its call, op and queue depth (``ChunkLaunches``).

Per chunk, in this order: the chunk's host ranges are added, its API calls are added
with the op open on their thread when they began (rule 1 of the attribution), its GPU
records look their call up (a call never started after its record), then the range by
External id and the TF node's range for those still without an op, then the queue
depth of each linked record other than a sync. Columns read (``LAUNCH_COLUMNS``) are
unclipped times (``start_ns``, ``duration_ns``) as the timeline's rules use them, and
the clipped ``s``/``e`` for a call's own duration (the api view's).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tfprof.collector.read.engine import Read
from tfprof.collector.read.launch_links import (
    AMBIGUOUS_CALLS,
    MAX_CALLS,
    LaunchLinker,
    LinkCounts,
    keys_of,
)
from tfprof.collector.read.launch_queues import LaunchQueues
from tfprof.collector.read.op_ranges import AMBIGUOUS_RANGES, EXTERNAL_BITS, OpRanges
from tfprof.collector.read.settled_chunks import Settled
from tfprof.collector.read.time_chunks import NEVER, Chunk
from tfprof.collector.timeline.attribution import (
    HOW_EXTERNAL_ID,
    HOW_LAUNCH,
    HOW_NODE_NAME,
    HOW_NONE,
)

API, MARKER, SYNC = 5, 6, 4
LAUNCH_TABLES = frozenset({"kernels", "copies", "memsets", "syncs", "api_calls", "markers"})
LAUNCH_COLUMNS = frozenset(
    {"start_ns", "duration_ns", "correlation", "external_id", "thread", "name", "domain",
     "device", "stream"}
)  # fmt: skip
LAUNCH_QUERIES = (AMBIGUOUS_CALLS, AMBIGUOUS_RANGES)


@dataclass(frozen=True)
class ChunkLaunches:
    """The GPU records of a settled chunk (its rows ``rows``, in order) and the host
    side of each. A call is numbered in the order calls are met (``call``; -1: the
    record is unlinked, and the call columns are 0)."""

    rows: np.ndarray
    call: np.ndarray
    call_duration: np.ndarray  # the call's own time in the window (clipped, ns)
    call_name: np.ndarray  # names id
    latency: np.ndarray  # record start - call end (unclipped), negatives 0
    op: np.ndarray  # names id of the range it ran for; -1 none
    how: np.ndarray  # timeline.attribution.HOW_*: which rule found the op
    queue: np.ndarray  # its stream's launched-not-started records; -1 unlinked or a sync


@dataclass
class HowCounts:
    """GPU records by the attribution rule that found their op, as
    ``timeline.attribution.OpAttribution.counts``."""

    how: np.ndarray = field(default_factory=lambda: np.zeros(4, dtype=np.int64))

    def counts(self) -> dict[str, int]:
        h = self.how
        return {
            "by_launch": int(h[HOW_LAUNCH]),
            "by_external_id": int(h[HOW_EXTERNAL_ID]),
            "by_node_name": int(h[HOW_NODE_NAME]),
            "unattributed": int(h[HOW_NONE]),
        }


class HostLaunches:
    """Links, ops and queue depths of GPU records, fed a component's chunks (with
    ``LAUNCH_COLUMNS``, of ``LAUNCH_TABLES``) in order. ``read`` must have run
    ``LAUNCH_QUERIES`` (a sweep names them; an export declares them)."""

    def __init__(self, read: Read, capacity: int = MAX_CALLS) -> None:
        self.read = read
        self.capacity = capacity
        self.groups = np.asarray(read.cat.link_groups, dtype=np.int64)
        self._ambiguous_calls = keys_of(read.rows(AMBIGUOUS_CALLS))
        self._ambiguous_ranges = keys_of(read.rows(AMBIGUOUS_RANGES), EXTERNAL_BITS)
        self.links, self.ranges, self.queues, self.settled = self._fresh()
        self.counts = LinkCounts()
        self.how = HowCounts()
        self._calls = 0  # calls numbered so far

    def _fresh(self) -> tuple[LaunchLinker, OpRanges, LaunchQueues, Settled]:
        """What is carried through one component."""
        groups = self.read.cat.link_groups
        kept = ("end_ns", "duration", "name", "op", "serial")
        return (
            LaunchLinker(groups, self._ambiguous_calls, kept, self.capacity),
            OpRanges(self.read.names, groups, self._ambiguous_ranges, self.capacity),
            LaunchQueues(),
            Settled(),
        )

    def feed(self, chunk: Chunk) -> tuple[Chunk, ChunkLaunches] | None:
        """The settled rows of ``chunk`` (and any held before) and their GPU records'
        host side; None while nothing is settled."""
        settled = self.settled.feed(chunk)
        found = self._launches(settled) if settled is not None else None
        if chunk.bound == NEVER:  # the component is over: start the next afresh
            self._add_counts(self.links.counts)
            self.links, self.ranges, self.queues, self.settled = self._fresh()
        if settled is None or found is None:
            return None
        return settled, found

    def _add_counts(self, c: LinkCounts) -> None:
        t = self.counts
        t.linked, t.unknown = t.linked + c.linked, t.unknown + c.unknown
        t.missing, t.ambiguous = t.missing + c.missing, t.ambiguous + c.ambiguous
        t.evicted += c.evicted

    def _launches(self, chunk: Chunk) -> ChunkLaunches:
        kind, process = chunk["kind"], chunk["process"]
        start = chunk["start_ns"]
        end = start + chunk["duration_ns"]
        ranges = np.flatnonzero((kind == MARKER) & (chunk["thread"] != 0))
        if ranges.shape[0]:
            self.ranges.add(process[ranges], chunk["thread"][ranges], start[ranges],
                            end[ranges], chunk["name"][ranges], chunk["domain"][ranges],
                            chunk["external_id"][ranges])  # fmt: skip
        calls = np.flatnonzero(kind == API)
        if calls.shape[0]:
            op = self.ranges.innermost(process[calls], chunk["thread"][calls], start[calls])
            serial = self._calls + np.arange(calls.shape[0], dtype=np.int64)
            self._calls += calls.shape[0]
            s, e = chunk["s"][calls], chunk["e"][calls]
            self.links.add_calls(process[calls], chunk["correlation"][calls], {
                "start_ns": start[calls], "end_ns": end[calls], "duration": e - s,
                "name": chunk["name"][calls], "op": op, "serial": serial,
            })  # fmt: skip
        rows = np.flatnonzero(kind <= SYNC)
        out = self._records(chunk, rows, start)
        self.ranges.settle(chunk.bound)
        if self.links.book.size:
            self.queues.prune(self.links.book.oldest("start_ns"))
        return out

    def _records(self, chunk: Chunk, rows: np.ndarray, start: np.ndarray) -> ChunkLaunches:
        process = chunk["process"][rows]
        at = start[rows]
        hit, call = self.links.link(process, chunk["correlation"][rows], at)
        n = rows.shape[0]
        op = np.where(hit, call["op"], -1)
        how = np.where(op >= 0, HOW_LAUNCH, HOW_NONE)
        todo = np.flatnonzero(op < 0)
        if todo.shape[0]:
            got = self.ranges.by_external_id(
                process[todo], chunk["external_id"][rows[todo]], at[todo]
            )
            op[todo], how[todo] = got, np.where(got >= 0, HOW_EXTERNAL_ID, HOW_NONE)
            todo = todo[got < 0]
        if todo.shape[0]:
            got = self.ranges.by_node(process[todo], chunk["name"][rows[todo]], at[todo])
            op[todo], how[todo] = got, np.where(got >= 0, HOW_NODE_NAME, HOW_NONE)
        self.how.how += np.bincount(how, minlength=4)
        queue = np.full(n, -1, dtype=np.int64)
        work = np.flatnonzero(hit & (chunk["kind"][rows] != SYNC))
        if work.shape[0]:
            group = self.groups[process[work]]
            code = (group << 48) | (chunk["device"][rows[work]] << 32) | chunk["stream"][rows[work]]
            queue[work] = self.queues.depth(code, call["start_ns"][work], at[work])
        latency = np.where(hit, np.maximum(at - call["end_ns"], 0), 0)
        return ChunkLaunches(
            rows=rows,
            call=np.where(hit, call["serial"], -1),
            call_duration=np.where(hit, call["duration"], 0),
            call_name=np.where(hit, call["name"], 0),
            latency=latency,
            op=op,
            how=how,
            queue=queue,
        )

    def link_counts(self) -> LinkCounts:
        """What linking found in every component fed so far (the last one included)."""
        c = LinkCounts(**vars(self.counts))
        last = self.links.counts
        c.linked, c.unknown = c.linked + last.linked, c.unknown + last.unknown
        c.missing, c.ambiguous = c.missing + last.missing, c.ambiguous + last.ambiguous
        c.evicted += last.evicted
        return c
