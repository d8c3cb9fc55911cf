"""Op attribution: which host range (NVTX range, framework op, annotation) a GPU record ran for.

Per process, three rules, each only where the earlier ones found nothing:

1. **launch**: the innermost host range (MARKER record with a thread) open on the
   launching thread (the linked API record's ``thread``) at launch time (its start);
2. **external id**: the host range carrying the GPU record's ``external_id`` (Kineto
   gives every op an ``External id`` and copies it onto what the op launched);
3. **node name**: TensorFlow's GPU tracer names a kernel by its node, and ``tf_op``
   ranges are named ``<node>:<type>``: the latest such range of that node that started
   before the kernel.

Innermost-at-time is answered per thread with ``searchsorted`` and a vectorised walk up
the nesting (each range's parent is its nearest earlier range that ends no earlier),
never a Python loop per record.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tfprof.collector.timeline.flows import LaunchLinks, is_launched, link_launches
from tfprof.core.records import RecordKind

HOW_NONE, HOW_LAUNCH, HOW_EXTERNAL_ID, HOW_NODE_NAME = 0, 1, 2, 3
TF_OP_CATEGORY = "tf_op"


@dataclass(frozen=True)
class OpAttribution:
    """One process: GPU record ``gpu[i]`` ran for host range ``marker[i]`` (-1: none)."""

    gpu: np.ndarray  # row indices of the process's GPU records, ascending
    marker: np.ndarray  # row index of the MARKER record, -1 when none was found
    how: np.ndarray  # HOW_* per GPU record: which rule found it
    links: LaunchLinks

    def counts(self) -> dict[str, int]:
        how = np.bincount(self.how, minlength=4)
        return {
            "by_launch": int(how[HOW_LAUNCH]),
            "by_external_id": int(how[HOW_EXTERNAL_ID]),
            "by_node_name": int(how[HOW_NODE_NAME]),
            "unattributed": int(how[HOW_NONE]),
        }


def _parents(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Each range's enclosing range: the nearest earlier one (in start order) ending no earlier.

    ``start`` ascending, ties longest first. Pointer jumping keeps the invariant that every
    range strictly between ``parent[i]`` and ``i`` ends before ``i`` does.
    """
    n = int(start.shape[0])
    parent = np.arange(-1, n - 1, dtype=np.int64)
    pending = np.flatnonzero(parent >= 0)
    while pending.shape[0]:
        p = parent[pending]
        short = end[p] < end[pending]
        pending = pending[short]
        parent[pending] = parent[p[short]]
        pending = pending[parent[pending] >= 0]
    return parent


def innermost_at(
    thread: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    at_thread: np.ndarray,
    at_time: np.ndarray,
) -> np.ndarray:
    """For each query (thread, time), the index of the innermost range open then, or -1.

    A range ``[start, end]`` is open at its own start and end instants.
    """
    found = np.full(at_time.shape[0], -1, dtype=np.int64)
    if start.shape[0] == 0 or at_time.shape[0] == 0:
        return found
    for tid in np.unique(at_thread).tolist():
        mine = np.flatnonzero(thread == tid)
        if mine.shape[0] == 0:
            continue
        order = mine[np.lexsort((-end[mine], start[mine]))]
        s, e = start[order], end[order]
        parent = _parents(s, e)
        queries = np.flatnonzero(at_thread == tid)
        t = at_time[queries]
        cand = np.searchsorted(s, t, side="right") - 1
        while True:
            closed = np.flatnonzero((cand >= 0) & (e[np.maximum(cand, 0)] < t))
            if closed.shape[0] == 0:
                break
            cand[closed] = parent[cand[closed]]
        hit = cand >= 0
        found[queries[hit]] = order[cand[hit]]
    return found


def latest_started(
    key: np.ndarray, start: np.ndarray, at_key: np.ndarray, at_time: np.ndarray
) -> np.ndarray:
    """For each query (key, time), the index of the latest item of that key started by then."""
    found = np.full(at_time.shape[0], -1, dtype=np.int64)
    for k in np.unique(at_key).tolist():
        mine = np.flatnonzero(key == k)
        if mine.shape[0] == 0:
            continue
        order = mine[np.argsort(start[mine], kind="stable")]
        queries = np.flatnonzero(at_key == k)
        cand = np.searchsorted(start[order], at_time[queries], side="right") - 1
        hit = cand >= 0
        found[queries[hit]] = order[cand[hit]]
    return found


def _unique_lookup(keys: np.ndarray, rows: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """The row whose key equals each wanted key when exactly one row has it, else -1."""
    order = np.argsort(keys, kind="stable")
    k, r = keys[order], rows[order]
    lo = np.searchsorted(k, wanted, side="left")
    hi = np.searchsorted(k, wanted, side="right")
    out = np.full(wanted.shape[0], -1, dtype=np.int64)
    one = (hi - lo) == 1
    out[one] = r[lo[one]]
    return out


def _node_ranges(
    strings: Sequence[str], name: np.ndarray, ranges: np.ndarray, category: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(``tf_op`` range rows, the string id of their node name) for rule 3."""
    try:
        tf_op = strings.index(TF_OP_CATEGORY)
    except ValueError:
        return ranges[:0], ranges[:0]
    ops = ranges[category[ranges] == tf_op]
    node_of = {text: i for i, text in enumerate(strings) if i}
    ids = name[ops]
    table = np.zeros(max(len(strings), 1), dtype=np.int64)
    for i in np.unique(ids).tolist():
        if 0 < i < len(strings):
            table[i] = node_of.get(strings[i].rpartition(":")[0] or strings[i], 0)
    return ops, table[np.clip(ids, 0, len(strings) - 1)] if len(strings) else ids


def attribute_ops(records: Mapping[str, np.ndarray], strings: Sequence[str]) -> OpAttribution:
    """Attribute every GPU record of one process's ``records`` to a host range."""
    kind = records["kind"]
    start = records["start_ns"]
    end = start + np.maximum(records["duration_ns"], 0)
    thread = records["thread"]
    links = link_launches(kind, records["correlation"])
    gpu = np.flatnonzero(is_launched(kind))
    marker = np.full(gpu.shape[0], -1, dtype=np.int64)
    how = np.zeros(gpu.shape[0], dtype=np.int64)
    ranges = np.flatnonzero((kind == RecordKind.MARKER) & (thread != 0))
    if ranges.shape[0] == 0:
        return OpAttribution(gpu, marker, how, links)

    # 1. innermost range on the launching thread at launch time
    slot = np.searchsorted(gpu, links.gpu)
    found = innermost_at(
        thread[ranges], start[ranges], end[ranges], thread[links.api], start[links.api]
    )
    hit = found >= 0
    marker[slot[hit]] = ranges[found[hit]]
    how[slot[hit]] = HOW_LAUNCH

    # 2. the range with the record's external id
    ext = records["external_id"]
    todo = np.flatnonzero((marker < 0) & (ext[gpu] != 0))
    if todo.shape[0]:
        got = _unique_lookup(ext[ranges], ranges, ext[gpu[todo]])
        ok = got >= 0
        marker[todo[ok]], how[todo[ok]] = got[ok], HOW_EXTERNAL_ID

    # 3. the latest tf_op range of the kernel's node that started before it
    todo = np.flatnonzero(marker < 0)
    if todo.shape[0]:
        ops, node = _node_ranges(strings, records["name"], ranges, records["category"])
        if ops.shape[0]:
            got = latest_started(node, start[ops], records["name"][gpu[todo]], start[gpu[todo]])
            ok = got >= 0
            marker[todo[ok]], how[todo[ok]] = ops[got[ok]], HOW_NODE_NAME
    return OpAttribution(gpu, marker, how, links)
