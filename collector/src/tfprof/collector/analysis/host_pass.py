"""The host side of a read with a selector (``prepare(select=...)``, what ``advise``
runs), streamed: once the GPU table is whole, each process's host records are read
again in batches of at most ``batch_rows`` (API calls first, then ranges, then memory
records), never a process's host side at once.

Per batch, the process's API calls link its GPU records (by correlation id, as
``flows.link_launches``: a record links when exactly one of the process's calls in the
window has its id), the selector sees the rows (``ProcessHost``) and keeps what it
needs of them, and the rows it keeps go to ``RecordSet.host``. The linked calls' own
duration and name are all that is kept of them (``LaunchCalls``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar, runtime_checkable

import numpy as np

from tfprof.collector.allocator import reusing_heap
from tfprof.collector.analysis.clipped_rows import ProcessHost, clip_to_window
from tfprof.collector.analysis.host_records import HOST_KINDS, HostRecords, LaunchCalls
from tfprof.collector.jobdata import StreamData
from tfprof.collector.timeline.prepare import TimeWindow, prepare_stream, rows_of
from tfprof.core.records import RecordKind

if TYPE_CHECKING:
    from tfprof.collector.analysis.record_set import HostSelector, RecordSet
    from tfprof.collector.analysis.record_table import RecordTable

_T = TypeVar("_T")
# Rows per batch: a few tens of MB of columns whatever the stream's size, and up to
# three batches at once (one read ahead, one linked, one with the selector's thread).
# 256K rows: at 100M records advise peaked at 1,950 MiB, 2,037 with 512K rows, and took
# no longer at 10M (the pass reuses the heap, allocator.reusing_heap).
BATCH_ROWS = 1 << 18
# Correlation ids are looked up in an array indexed by id (4 bytes per id up to the
# largest) while that holds at most DENSE_IDS per GPU record waiting or DENSE_MIN_IDS in
# all (4 MiB), else in a bit per id (waited for or not) and the count of waited-for ids
# before each 64 of them (1.5 bits per id): an id's index is that count and the set bits
# below its own in its word. (At 10M records, 42% of the calls are waited for; a binary
# search of the ids for them took 0.10 s of the main thread's 0.13 s of lookups.)
DENSE_IDS = 16
DENSE_MIN_IDS = 1 << 20
# The record columns a batch holds: what linking and selectors read, and what the host
# table holds of the rows kept.
HOST_READ = (
    "start_ns", "duration_ns", "correlation", "name", "thread", "device", "bytes",
    "memory_op", "category", "return_value",
)  # fmt: skip


@runtime_checkable
class Batched(Protocol):
    """A stream that reads its host records in batches itself (lake/lake_stream.py)."""

    def host_batches(
        self, columns: Sequence[str], batch_rows: int
    ) -> Iterator[tuple[dict[str, np.ndarray], list[str]]]: ...


@dataclass(frozen=True)
class ProcessSpan:
    """One process (its streams: a reconnect's share correlation ids) and its GPU rows."""

    job: int
    streams: tuple[tuple[StreamData, str, int], ...]  # (stream, task label, process index)
    job_label: str
    lo: int  # its rows of the GPU table: [lo, hi)
    hi: int


def host_batches(stream: StreamData, batch_rows: int) -> Iterator[StreamData]:
    """``stream`` with a batch of its host records at a time: API calls, then ranges, then
    memory records (a selector knows every call of a process before its first range)."""
    if isinstance(stream, Batched):
        for records, strings in _read_ahead(stream.host_batches(HOST_READ, batch_rows)):
            yield dataclasses.replace(stream, records=records, strings=strings)
        return
    kind = stream.records["kind"]
    for k in HOST_KINDS:
        rows = np.flatnonzero(kind == k)
        for lo in range(0, rows.shape[0], batch_rows):
            idx = rows[lo : lo + batch_rows]
            records = {c: v[idx] for c, v in stream.records.items()}
            yield dataclasses.replace(stream, records=records)


def _read_ahead(batches: Iterator[_T]) -> Iterator[_T]:
    """``batches``, the next one read on a thread while this one is used: Parquet
    decoding releases the GIL, so reading overlaps linking and the selector's work."""
    with ThreadPoolExecutor(1, thread_name_prefix="tfprof-read-ahead") as pool:
        ahead = pool.submit(next, batches, None)
        while (batch := ahead.result()) is not None:
            ahead = pool.submit(next, batches, None)
            yield batch
            del batch


_NO_WORDS = np.zeros(0, dtype=np.uint64)
_NO_COUNTS = np.zeros(0, dtype=np.int32)


class _Links:
    """One process's GPU records waiting for their calls, by correlation id."""

    def __init__(self, correlation: np.ndarray) -> None:
        known = np.flatnonzero(correlation != 0).astype(np.int32)  # a process's rows
        self.rows = known[np.argsort(correlation[known], kind="stable")]
        del known
        ids = correlation[self.rows].astype(np.int64)
        first = (
            np.flatnonzero(np.concatenate(([True], ids[1:] != ids[:-1]))) if ids.shape[0] else ids
        )
        # GPU records per id (a process's rows: int32, as ``rows``)
        self.per_id = np.diff(np.append(first, ids.shape[0])).astype(np.int32)
        ids = ids[first]  # each id once, ascending; only the lookups below keep them
        del first
        n = self.n_ids = ids.shape[0]
        self.calls = np.zeros(n, dtype=np.int8)  # calls seen per id (2: ambiguous)
        self.end = np.zeros(n, dtype=np.int64)  # the call's unclipped end (latency)
        self.duration = np.zeros(n, dtype=np.int64)  # its clipped duration
        self.name = np.zeros(n, dtype=np.int32)
        self._low, self._high = (int(ids[0]), int(ids[-1])) if n else (0, -1)
        # CUDA numbers the calls of a process one after the other: an array of id
        # indices by id is small, and a lookup in it beats a binary search.
        self._index: np.ndarray | None = None
        self._waited = _NO_WORDS  # a bit per id from the lowest to the highest
        self._before = _NO_COUNTS  # waited-for ids before each word
        if n and self._low > 0 and self._high < max(DENSE_IDS * n, DENSE_MIN_IDS):
            self._index = np.full(self._high + 2, -1, dtype=np.int32)
            self._index[ids] = np.arange(n, dtype=np.int32)
        elif n:
            # Column by column, each freed once used: at 100M records a process waits
            # for 4M ids, and this runs while the GPU table is held.
            ids -= self._low  # each id's offset
            bits = np.left_shift(np.uint64(1), (ids & 63).astype(np.uint64))
            ids >>= 6  # each id's word
            at = np.flatnonzero(np.concatenate(([True], ids[1:] != ids[:-1])))  # sorted
            self._waited = np.zeros(int(ids[-1]) + 1, dtype=np.uint64)
            # Each id once: a word's bits sum to their OR.
            self._waited[ids[at]] = np.add.reduceat(bits, at)
            del ids, bits, at
            counts = popcount(self._waited)
            self._before = np.cumsum(counts, dtype=np.int32)
            self._before -= counts

    def add(self, correlation: np.ndarray, end: np.ndarray, duration: np.ndarray,
            name: np.ndarray) -> None:  # fmt: skip
        if not self.n_ids:
            return
        at, hit = self._find(correlation)
        seen = np.bincount(at, minlength=self.calls.shape[0])  # ufunc.at is far slower
        # Only the ids found are touched (a batch finds a tenth of a process's ids).
        self.calls[at] = np.minimum(self.calls[at] + np.minimum(seen[at], 2), 2)
        self.end[at] = end[hit]
        self.duration[at] = duration[hit]
        self.name[at] = name[hit]

    def _find(self, correlation: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the id index of each call whose id a GPU record waits for, those calls)."""
        corr = correlation.astype(np.int64, copy=False)
        if self._index is not None:
            top = self._index.shape[0] - 1  # slots 0 and top hold -1: ids not waited for
            pos = self._index[np.clip(corr, 0, top)]
            hit = np.flatnonzero(pos >= 0)
            return pos[hit], hit
        low, high = self._low, self._high
        inside = np.flatnonzero((corr >= low) & (corr <= high))
        offset = (corr[inside] - low).astype(np.uint64)
        word = (offset >> np.uint64(6)).astype(np.intp)
        bits = np.take(self._waited, word)
        own = np.left_shift(np.uint64(1), offset & np.uint64(63))
        # Ranked before being picked: one pick by index beats four by mask (random
        # masks mispredict; measured 0.4 ms against 2.4 a batch).
        rank = self._before[word] + popcount(bits & (own - np.uint64(1)))
        waited = np.flatnonzero(bits & own)
        return rank[waited], inside[waited]

    def finish(self, start: np.ndarray, api: np.ndarray,
               first_call: int) -> tuple[LaunchCalls, np.ndarray, np.ndarray]:  # fmt: skip
        """Write each linked GPU record's call (ids from ``first_call``) into ``api`` (a
        column of the process's GPU rows, whose ``start`` is given); the linked calls'
        columns, and the linked rows with their launch latency."""
        # The lookups are done: freed before the outputs are made (at 100M records the
        # last process's are made at the pass's peak).
        self._index, self._waited, self._before = None, _NO_WORDS, _NO_COUNTS
        linked = self.calls == 1
        call = np.full(self.n_ids, -1, dtype=api.dtype)
        call[linked] = first_call + np.arange(int(np.count_nonzero(linked)), dtype=api.dtype)
        per_row = np.repeat(np.arange(self.n_ids, dtype=np.int32), self.per_id)
        rows = self.rows[linked[per_row]]
        per_row = per_row[linked[per_row]]
        api[rows] = call[per_row]
        # As HTA's launch statistics: a record starting before its call's end is 0. A
        # record clipped at the window's start began before any call in the window ended.
        latency = start[rows]  # in place: at 100M records this runs at the pass's peak
        latency -= self.end[per_row]
        np.maximum(latency, 0, out=latency)
        return LaunchCalls(self.duration[linked], self.name[linked]), rows, latency


def _swar_popcount(words: np.ndarray) -> np.ndarray:
    """Set bits per uint64 (numpy before 2.0 has no ``bitwise_count``)."""
    x = words - ((words >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    counts: np.ndarray = ((x * np.uint64(0x0101010101010101)) >> np.uint64(56)).astype(np.int32)
    return counts


def popcount(words: np.ndarray) -> np.ndarray:
    """Set bits per uint64, as int32."""
    if hasattr(np, "bitwise_count"):
        counts: np.ndarray = np.bitwise_count(words).astype(np.int32)
        return counts
    return _swar_popcount(words)


def read_host(
    rs: RecordSet,
    table: RecordTable,
    spans: Sequence[ProcessSpan],
    window: TimeWindow,
    select: HostSelector,
    batch_rows: int = BATCH_ROWS,
) -> RecordSet:
    """``rs`` (the GPU table, unlinked) with its records linked, ``host`` holding the
    rows ``select`` keeps and ``calls`` the linked calls."""
    with reusing_heap():  # batches of the same sizes, made and freed over and over
        linked = _read_host(rs, table, spans, window, select, batch_rows)
    # What the selector does once it has seen every row (host-stalls' covers: at 100M
    # records the pass's peak) starts from a heap that gave back what the batches freed.
    select.end()
    return linked


def _read_host(
    rs: RecordSet,
    table: RecordTable,
    spans: Sequence[ProcessSpan],
    window: TimeWindow,
    select: HostSelector,
    batch_rows: int,
) -> RecordSet:
    n = len(rs)
    # Narrow while every value fits (calls are fewer than GPU rows; a latency over 2 s
    # makes the column int64 from then on).
    api = np.full(n, -1, dtype=np.int32 if n < 2**31 else np.int64)
    latency = np.zeros(n, dtype=np.int32)
    # The linked calls' columns, filled in place (no list of parts joined at the end):
    # a call links at least one GPU record, so ``n`` bounds them; pages never written
    # are never resident. Duration int32 until a call of 2 s or more.
    call_duration = np.empty(n, dtype=np.int32)
    call_name = np.empty(n, dtype=np.int32)
    calls = 0
    select.start(rs)
    for span in spans:
        links = _Links(rs.correlation[span.lo : span.hi])
        for stream, task, process in span.streams:
            for batch in host_batches(stream, batch_rows):
                prep = prepare_stream(batch, window, span.job_label, task)
                kind = prep.column("kind")
                name = table.names.intern_column(batch.strings, prep.column("name"), unnamed=0)
                calls_in = rows_of(np.flatnonzero(kind == RecordKind.API), kind.shape[0])
                start, end, _ = clip_to_window(prep.start, prep.end, window)
                links.add(prep.column("correlation")[calls_in], prep.end[calls_in],
                          end[calls_in] - start[calls_in], name[calls_in])  # fmt: skip
                m = kind.shape[0]
                seen = {"kind": kind, "start": start, "end": end, "name": name,
                        "thread": prep.column("thread"),
                        "job": np.full(m, span.job, dtype=np.int32),
                        "process": np.full(m, process, dtype=np.int32)}  # fmt: skip
                keep = np.flatnonzero(select(ProcessHost(seen, table.names.names)))
                del seen, start, end
                table.add_host_rows(prep, keep, window, span.job, process, name)
                table.add_memory_base(prep, window, span.job)
                del prep, batch
            select.end_process()
        found, rows, late = links.finish(rs.start[span.lo : span.hi], api[span.lo : span.hi],
                                         calls)  # fmt: skip
        if late.shape[0] and int(late.max()) > np.iinfo(latency.dtype).max:
            latency = latency.astype(np.int64)
        latency[span.lo : span.hi][rows] = late
        del rows, late
        k = int(found.duration.shape[0])
        if k and int(found.duration.max()) > np.iinfo(call_duration.dtype).max:
            call_duration = call_duration.astype(np.int64)
        call_duration[calls : calls + k] = found.duration
        call_name[calls : calls + k] = found.name
        calls += k
        del links, found
    return dataclasses.replace(
        rs,
        names=table.names.names,
        api=api,
        latency=latency,
        host=HostRecords(**table.host_columns()),
        calls=LaunchCalls(call_duration[:calls], call_name[:calls]),
        memory_gpus=tuple(table.memory_gpus.gpus),
        memory_base=tuple((j, g, b) for (j, g), b in sorted(table.memory_base.items()) if b),
    )
