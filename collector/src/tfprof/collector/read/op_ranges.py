"""Op attribution with carried state: which host range (framework op, NVTX range,
annotation) a GPU record ran for, a settled chunk at a time (``settled_chunks``).

The rules are ``timeline.attribution``'s, each where the earlier found nothing:

1. the innermost range (a MARKER with a thread) open on the launching call's thread
   when the call began: per (link group, thread), the ranges still open are carried;
2. the range carrying the record's External id, when exactly one range of its link
   group in the window does (``AMBIGUOUS_RANGES``, SQL); carried: the ranges with an
   External id seen so far, newest first, at most ``launch_links.MAX_CALLS``;
3. the latest TensorFlow ``tf_op`` range of the record's node (ranges named
   ``<node>:<type>``, kernels named ``<node>``) started by the record's start: carried,
   per (link group, node), the latest one.

A range is open at its own start and end instants; what is asked of an instant t sees
every range started at or before t (settled chunks hold no instant back). A record
never takes a range that started after it (rules 2 and 3, as rule 1 by its nature).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tfprof.collector.read.launch_links import MAX_CALLS, KeyBook, isin_sorted, link_key
from tfprof.collector.read.needs import Query
from tfprof.collector.timeline.attribution import TF_OP_CATEGORY, innermost_at, latest_started
from tfprof.collector.timeline.prepare import NameTable

# (link group, External id) that several host ranges in the window carry: never taken.
AMBIGUOUS_RANGES = Query(
    "SELECT p.link, h.external_id FROM {h} h JOIN {p} p USING (process) "
    "WHERE h.kind = 6 AND h.thread <> 0 AND h.external_id <> 0 GROUP BY ALL HAVING count(*) > 1"
)
EXTERNAL_BITS = 40  # of an External id kept in its key (Kineto numbers ops from 1)
_EMPTY = np.zeros(0, dtype=np.int64)


class OpRanges:
    """The host ranges a chunk's calls and GPU records are attributed to."""

    def __init__(
        self,
        names: NameTable,
        groups: Sequence[int],
        ambiguous: np.ndarray,
        capacity: int = MAX_CALLS,
    ) -> None:
        self.names = names
        self.groups = np.asarray(groups, dtype=np.int64)
        self.ambiguous = ambiguous  # sorted (group, External id) keys
        self._threads: dict[tuple[int, int], int] = {}  # (group, thread) -> dense id
        # Ranges still open (or of the chunk being read): thread id, start, end, name.
        self._open = (_EMPTY, _EMPTY, _EMPTY, _EMPTY)
        self._chunk = (_EMPTY, _EMPTY, _EMPTY, _EMPTY)
        self._external = KeyBook(("start_ns", "name"), capacity)
        # Per (group, node) code, sorted: the latest tf_op range's start and name.
        self._nodes = (_EMPTY, _EMPTY, _EMPTY)
        self._chunk_nodes = (_EMPTY, _EMPTY, _EMPTY)
        self._node_of: dict[int, int] = {}  # names id of a tf_op range -> its node's

    def thread_ids(self, process: np.ndarray, thread: np.ndarray) -> np.ndarray:
        """A dense id per (link group, thread)."""
        group = self.groups[process]
        pairs = np.stack([group, thread.astype(np.int64)], axis=1)
        found, inverse = np.unique(pairs, axis=0, return_inverse=True)
        ids = np.array(
            [self._threads.setdefault((g, t), len(self._threads)) for g, t in found.tolist()],
            dtype=np.int64,
        )
        out: np.ndarray = ids[inverse.reshape(-1)] if ids.shape[0] else _EMPTY
        return out

    def add(
        self,
        process: np.ndarray,
        thread: np.ndarray,
        start_ns: np.ndarray,
        end_ns: np.ndarray,
        name: np.ndarray,
        domain: np.ndarray,
        external_id: np.ndarray,
    ) -> None:
        """A settled chunk's ranges on host threads (thread != 0), before its queries."""
        self._chunk = (self.thread_ids(process, thread), start_ns, end_ns, name)
        with_id = external_id != 0
        if with_id.any():
            key = link_key(self.groups[process[with_id]], external_id[with_id], EXTERNAL_BITS)
            self._external.add(key, {"start_ns": start_ns[with_id], "name": name[with_id]})
        tf_op = self.names.intern(TF_OP_CATEGORY)
        ops = np.flatnonzero(domain == tf_op)
        node = self._nodes_of(name[ops])
        ok = node >= 0
        code = (self.groups[process[ops[ok]]] << 32) | node[ok]
        self._chunk_nodes = (code, start_ns[ops[ok]], name[ops[ok]])

    def _nodes_of(self, name: np.ndarray) -> np.ndarray:
        """The names id of each tf_op range's node (``<node>:<type>``); -1 unnamed."""
        ids, inverse = np.unique(name, return_inverse=True)
        new = [i for i in ids.tolist() if i not in self._node_of]
        names = self.names.names if new else ()
        for i in new:
            if i not in self._node_of:
                text = names[i] if i else ""
                self._node_of[i] = self.names.intern(text.rpartition(":")[0] or text) if i else -1
        node = np.array([self._node_of[i] for i in ids.tolist()], dtype=np.int64)
        out: np.ndarray = node[inverse.reshape(-1)] if ids.shape[0] else _EMPTY
        return out

    def innermost(self, process: np.ndarray, thread: np.ndarray, time: np.ndarray) -> np.ndarray:
        """Rule 1: the names id of the innermost range open on (group, thread) at each
        time (a call's start), -1 when none."""
        t, s, e, n = (np.concatenate(p) for p in zip(self._open, self._chunk, strict=True))
        if not n.shape[0]:
            return np.full(time.shape[0], -1, dtype=np.int64)
        found = innermost_at(t, s, e, self.thread_ids(process, thread), time)
        out: np.ndarray = np.where(found >= 0, n[np.maximum(found, 0)], -1)
        return out

    def by_external_id(
        self, process: np.ndarray, external_id: np.ndarray, time: np.ndarray
    ) -> np.ndarray:
        """Rule 2: the names id of the one range of the group with each External id that
        started by ``time``, -1 when none."""
        key = link_key(self.groups[process], external_id, EXTERNAL_BITS)
        hit, values = self._external.find(key)
        hit &= (external_id != 0) & ~isin_sorted(key, self.ambiguous)
        hit &= values["start_ns"] <= time
        out: np.ndarray = np.where(hit, values["name"], -1)
        return out

    def by_node(self, process: np.ndarray, name: np.ndarray, time: np.ndarray) -> np.ndarray:
        """Rule 3: the names id of the latest tf_op range of the node a record is named
        after that started by ``time``, -1 when none."""
        code, start, op = self._all_nodes()
        if not code.shape[0]:
            return np.full(name.shape[0], -1, dtype=np.int64)
        asked = (self.groups[process] << 32) | name.astype(np.int64)
        found = latest_started(code, start, asked, time)
        out: np.ndarray = np.where(found >= 0, op[np.maximum(found, 0)], -1)
        return out

    def _all_nodes(self) -> tuple[np.ndarray, ...]:
        """Each node's latest range carried, then the chunk's tf_op ranges."""
        return tuple(np.concatenate(p) for p in zip(self._nodes, self._chunk_nodes, strict=True))

    def settle(self, bound: int) -> None:
        """The chunk is done: keep the ranges open at ``bound`` or later, and each node's
        latest range."""
        t, s, e, n = (np.concatenate(p) for p in zip(self._open, self._chunk, strict=True))
        keep = e >= bound
        self._open = (t[keep], s[keep], e[keep], n[keep])
        self._chunk = (_EMPTY, _EMPTY, _EMPTY, _EMPTY)
        code, start, op = self._all_nodes()
        self._chunk_nodes = (_EMPTY, _EMPTY, _EMPTY)
        if code.shape[0]:
            order = np.lexsort((start, code))  # stable: a later row wins a tie in start
            code, start, op = code[order], start[order], op[order]
            last = np.append(code[1:] != code[:-1], True)
            self._nodes = (code[last], start[last], op[last])

    def reset(self) -> None:
        """A component is over: what is carried belongs to it alone."""
        self._open = self._chunk = (_EMPTY, _EMPTY, _EMPTY, _EMPTY)
        self._nodes = self._chunk_nodes = (_EMPTY, _EMPTY, _EMPTY)
        self._external = KeyBook(("start_ns", "name"), self._external.capacity)
