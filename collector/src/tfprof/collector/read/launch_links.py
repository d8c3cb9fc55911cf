"""Launch links with carried state: each GPU record linked to the CUDA API call that
launched it, a chunk at a time, in start order.

The rule is ``timeline.flows.link_launches``': CUPTI gives a call and the activity it
caused one correlation id, unique within a process (the streams of one traced process,
a reconnect's, share them: a *link group*, ``Catalog.link_groups``). A kernel, copy,
memset or sync links to the call of its group carrying its id when exactly one call in
the window does; correlation 0 is "unknown" and never links. Which ids several calls
carry is known before the sweep (``AMBIGUOUS_CALLS``, SQL over the window), so those
never link, as today.

Carried between chunks: the calls seen so far, newest first (``KeyBook``), at most
``MAX_CALLS`` of them: a call is looked for by the records it launched, which start
after it by the launch queue's wait (a few thousand launches at most). What falls out of
the book is counted (``LinkCounts.evicted``); a record whose call it held then stays
unlinked. A record never links to a call that started after it (clock noise between
the two could make one appear to; the shipped traces have none).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tfprof.collector.read.needs import Query

# Calls (or ranges) a book holds: it keeps between half of it and all of it, the newest.
MAX_CALLS = 1 << 20
# (link group, correlation id) that several API calls in the window carry: never linked.
AMBIGUOUS_CALLS = Query(
    "SELECT p.link, h.correlation FROM {h} h JOIN {p} p USING (process) "
    "WHERE h.kind = 5 AND h.correlation <> 0 GROUP BY ALL HAVING count(*) > 1"
)
_EMPTY = np.zeros(0, dtype=np.int64)
NONE = int(np.iinfo(np.int64).min)


def link_key(group: np.ndarray, ident: np.ndarray, bits: int = 32) -> np.ndarray:
    """(link group, an id: a uint32 correlation, or an External id's low ``bits``) as
    one int64."""
    low = ident.astype(np.int64) & ((1 << bits) - 1)
    key: np.ndarray = (group.astype(np.int64) << bits) | low
    return key


def keys_of(rows: Sequence[tuple[object, ...]], bits: int = 32) -> np.ndarray:
    """``link_key`` of (group, id) rows (``AMBIGUOUS_CALLS``' and the like), sorted."""
    if not rows:
        return _EMPTY
    pairs = np.array([(int(str(g)), int(str(i))) for g, i in rows], dtype=np.int64)
    return np.sort(link_key(pairs[:, 0], pairs[:, 1], bits))


class KeyBook:
    """Values by int64 key, added in time order, found newest first.

    Blocks of rows sorted by key, merged as they come so that there are few (each about
    twice the size of the next newer one, at most half the capacity); once more than
    ``capacity`` rows are held, the oldest blocks go (``evicted`` counts their rows)."""

    def __init__(self, columns: Sequence[str], capacity: int = MAX_CALLS) -> None:
        self.columns = tuple(columns)
        self.capacity = capacity
        self._blocks: list[tuple[np.ndarray, dict[str, np.ndarray]]] = []  # oldest first
        self.size = 0
        self.evicted = 0

    def add(self, keys: np.ndarray, values: Mapping[str, np.ndarray]) -> None:
        if not keys.shape[0]:
            return
        order = np.argsort(keys, kind="stable")
        self._blocks.append((keys[order], {c: values[c][order] for c in self.columns}))
        self.size += int(keys.shape[0])
        while len(self._blocks) > 1 and self._mergeable(*self._blocks[-2:]):
            (ka, va), (kb, vb) = self._blocks[-2], self._blocks[-1]
            both = np.concatenate([ka, kb])
            order = np.argsort(both, kind="stable")
            merged = {c: np.concatenate([va[c], vb[c]])[order] for c in self.columns}
            self._blocks[-2:] = [(both[order], merged)]
        while self.size > self.capacity and len(self._blocks) > 1:
            gone = self._blocks.pop(0)[0].shape[0]
            self.size -= gone
            self.evicted += gone

    def _mergeable(
        self, older: tuple[np.ndarray, object], newer: tuple[np.ndarray, object]
    ) -> bool:
        """Merge a block into the older one before it while that is at most twice its
        size, up to half the capacity: few blocks, and eviction keeps half at least."""
        a, b = int(older[0].shape[0]), int(newer[0].shape[0])
        return a <= 2 * b and a + b <= self.capacity // 2

    def oldest(self, column: str) -> int:
        """The least value of ``column`` held in the oldest block (of a time column:
        the earliest time still held)."""
        return int(self._blocks[0][1][column].min()) if self._blocks else NONE

    def find(self, keys: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """(whether each key is held, its newest values: zeros where not held)."""
        n = keys.shape[0]
        hit = np.zeros(n, dtype=bool)
        out = {c: np.zeros(n, dtype=np.int64) for c in self.columns}
        todo = np.arange(n)
        for block_keys, values in reversed(self._blocks):
            if not todo.shape[0]:
                break
            want = keys[todo]
            at = np.searchsorted(block_keys, want, side="right") - 1  # the newest equal
            ok = at >= 0
            ok[ok] = block_keys[at[ok]] == want[ok]
            found = todo[ok]
            hit[found] = True
            for c in self.columns:
                out[c][found] = values[c][at[ok]]
            todo = todo[~ok]
        return hit, out


@dataclass
class LinkCounts:
    """What linking found, for metadata: as ``flows.LaunchLinks.stats``, plus the calls
    that fell out of the book."""

    linked: int = 0
    unknown: int = 0  # correlation 0
    missing: int = 0  # no call in the window carries it (or none before the record)
    ambiguous: int = 0  # several calls carry it
    evicted: int = 0  # calls dropped from the book before every record had looked

    def stats(self) -> dict[str, int]:
        return {
            "linked": self.linked,
            "unknown_correlation": self.unknown,
            "missing_api": self.missing,
            "ambiguous_api": self.ambiguous,
        }


class LaunchLinker:
    """Per link group, the calls seen so far by correlation id; GPU records look their
    call up. ``columns``: what is kept of each call (``start_ns`` always)."""

    def __init__(
        self,
        groups: Sequence[int],
        ambiguous: np.ndarray,
        columns: Sequence[str] = (),
        capacity: int = MAX_CALLS,
    ) -> None:
        self.groups = np.asarray(groups, dtype=np.int64)
        self.ambiguous = ambiguous  # sorted link keys
        self.book = KeyBook(tuple(dict.fromkeys(("start_ns", *columns))), capacity)
        self.counts = LinkCounts()

    def add_calls(
        self, process: np.ndarray, correlation: np.ndarray, values: Mapping[str, np.ndarray]
    ) -> None:
        """A chunk's API calls (in start order), with ``start_ns`` and the columns kept."""
        known = correlation != 0
        key = link_key(self.groups[process[known]], correlation[known])
        self.book.add(key, {c: v[known] for c, v in values.items()})
        self.counts.evicted = self.book.evicted

    def link(
        self, process: np.ndarray, correlation: np.ndarray, start_ns: np.ndarray
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """For a chunk's GPU records (calls of the chunk added first): whether each
        links, and its call's columns (zeros where it does not)."""
        n = correlation.shape[0]
        unknown = correlation == 0
        key = link_key(self.groups[process], correlation)
        ambiguous = ~unknown & isin_sorted(key, self.ambiguous)
        hit, values = self.book.find(key)
        hit &= ~unknown & ~ambiguous & (values["start_ns"] <= start_ns)
        c = self.counts
        c.linked += int(np.count_nonzero(hit))
        c.unknown += int(np.count_nonzero(unknown))
        c.ambiguous += int(np.count_nonzero(ambiguous))
        c.missing += n - int(np.count_nonzero(hit | unknown | ambiguous))
        return hit, values


def isin_sorted(values: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Which ``values`` ``table`` (sorted) holds."""
    if not table.shape[0]:
        return np.zeros(values.shape[0], dtype=bool)
    at = np.minimum(np.searchsorted(table, values), table.shape[0] - 1)
    found: np.ndarray = table[at] == values
    return found
