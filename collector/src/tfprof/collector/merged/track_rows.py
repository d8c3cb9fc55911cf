"""The records of a time chunk on the timeline's tracks: who is a task, which track each
record goes on, and the order a track's slices come in.

A **task** is what a job's track names say after ``/task:``: the streams of one job
that share a task label (normally one process; the streams of one process that
reconnected share it), ordered as the timeline always ordered them (numeric task ids
first, then by host and pid).

A record goes on its task's **stream track** ``.../gpu:N/stream:M`` (kernels, copies,
memsets, syncs, and host ranges without a thread: Kineto's ``gpu_user_annotation``) or
on its **thread track** ``.../cpu/thread:TID`` (API calls, host ranges with a thread);
a copy also on its GPU's **memcpy track**; a MEMORY record on none (it is a counter).

A track's slices are in **timeline order**: by start, and at one instant by record
kind (the order the tables were always read in), arrival order after that. The engine's
chunks are in start order, settled (no instant split between two chunks); a chunk's
ties are sorted by kind (``timeline_order``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial

import numpy as np

from tfprof.collector.read.lake_catalog import Catalog
from tfprof.collector.read.time_chunks import Columns
from tfprof.core.records import RecordKind
from tfprof.core.tracks import TrackKey

# The record columns that say which track a record goes on.
PLACING = ("device", "stream", "thread", "start_ns", "duration_ns")


@dataclass(frozen=True)
class Task:
    job: int  # index into the catalog's jobs
    job_label: str
    label: str
    processes: tuple[int, ...]  # catalog indices

    @property
    def cpu(self) -> TrackKey:
        return TrackKey.for_cpu(self.job_label, self.label)


def _task_order(task: str) -> tuple[int, int, str]:
    return (0, int(task), task) if task.isdigit() else (1, 0, task)


def tasks_of(cat: Catalog) -> list[Task]:
    """The catalog's tasks: jobs in order, each job's tasks by task id, host and pid
    (of the task's first stream)."""
    tasks: list[Task] = []
    for j, job in enumerate(cat.jobs):
        by_label: dict[str, list[int]] = {}
        for p, ref in enumerate(cat.processes):
            if ref.job == j:
                by_label.setdefault(ref.task, []).append(p)

        firsts = {label: cat.streams[ps[0]] for label, ps in by_label.items()}
        order = sorted(
            by_label, key=lambda k: (*_task_order(firsts[k].task), firsts[k].host, firsts[k].pid)
        )
        tasks += [Task(j, job.label, label, tuple(by_label[label])) for label in order]
    return tasks


def timeline_order(cols: Columns) -> np.ndarray | None:
    """The order that puts a settled chunk's rows (in start order, no instant split with
    another chunk: ``read.settled_chunks``) in timeline order; None when they are."""
    start, kind = cols["start_ns"], cols["kind"]
    ties = start[1:] == start[:-1]
    if not bool((ties & (kind[1:] < kind[:-1])).any()):
        return None
    order: np.ndarray = np.lexsort((kind, start))  # stable: arrival order after the kind
    return order


class TrackRows:
    """Which track each row of a chunk goes on; tracks are numbered as first met (the
    same numbers in both passes over the same records)."""

    def __init__(self, cat: Catalog, tasks: list[Task]) -> None:
        self.tasks = tasks
        task_of = np.zeros(max(len(cat.processes), 1), dtype=np.int64)
        for t, task in enumerate(tasks):
            task_of[list(task.processes)] = t
        self.task_of = task_of
        self.keys: list[TrackKey] = []  # per track
        self.task: list[int] = []  # per track: its task's index
        self._streams: dict[int, int] = {}
        self._copies: dict[int, int] = {}
        self._threads: dict[tuple[int, int], int] = {}

    def _new(self, task: int, key: TrackKey) -> int:
        self.keys.append(key)
        self.task.append(task)
        return len(self.keys) - 1

    def split(self, cols: Columns) -> Iterator[tuple[int, np.ndarray]]:
        """(track, the rows on it, ascending) for every track the chunk's rows go on:
        stream and thread tracks, then memcpy tracks (copies again)."""
        kind, thread = cols["kind"], cols["thread"]
        task = self.task_of[cols["process"]]
        on_thread = (kind == RecordKind.API) | ((kind == RecordKind.MARKER) & (thread != 0))
        on_gpu = ~on_thread & (kind != RecordKind.MEMORY)
        track = np.full(kind.shape[0], -1, dtype=np.int64)
        gpu = np.flatnonzero(on_gpu)
        if gpu.shape[0]:
            code = (task[gpu] << 48) | (cols["device"][gpu] << 32) | cols["stream"][gpu]
            track[gpu] = _ids(code, self._stream_track)
        host = np.flatnonzero(on_thread)
        for t in np.unique(task[host]).tolist():
            mine = host[task[host] == t]
            track[mine] = _ids(thread[mine], partial(self._thread_track, t))
        yield from _groups(track)
        copies = np.flatnonzero(kind == RecordKind.MEMCPY)
        if copies.shape[0]:
            code = (task[copies] << 16) | cols["device"][copies]
            for t, idx in _groups(_ids(code, self._copy_track)):
                yield t, copies[idx]

    def _stream_track(self, code: int) -> int:
        found = self._streams.get(code)
        if found is None:
            task = self.tasks[code >> 48]
            key = TrackKey.for_stream(task.job_label, task.label, (code >> 32) & 0xFFFF,
                                      code & 0xFFFFFFFF)  # fmt: skip
            found = self._streams[code] = self._new(code >> 48, key)
        return found

    def _copy_track(self, code: int) -> int:
        found = self._copies.get(code)
        if found is None:
            task = self.tasks[code >> 16]
            key = TrackKey.for_memcpy(task.job_label, task.label, code & 0xFFFF)
            found = self._copies[code] = self._new(code >> 16, key)
        return found

    def _thread_track(self, t: int, thread: int) -> int:
        found = self._threads.get((t, thread))
        if found is None:
            task = self.tasks[t]
            key = TrackKey.for_thread(task.job_label, task.label, thread)
            found = self._threads[(t, thread)] = self._new(t, key)
        return found


def _ids(codes: np.ndarray, track_of: Callable[[int], int]) -> np.ndarray:
    """The track of each code (``track_of`` finds or makes it), once per distinct code."""
    if (codes == codes[0]).all():
        return np.full(codes.shape[0], track_of(int(codes[0])), dtype=np.int64)
    unique, inverse = np.unique(codes, return_inverse=True)
    ids = np.asarray([track_of(k) for k in unique.tolist()], dtype=np.int64)
    result: np.ndarray = ids[inverse.reshape(-1)]
    return result


def _groups(track: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """(track, its rows ascending) for each track >= 0 of ``track`` (one per row)."""
    if not track.shape[0]:
        return
    if (track == track[0]).all():
        if track[0] >= 0:
            yield int(track[0]), np.arange(track.shape[0])
        return
    # A stable sort of 16-bit codes is a radix sort, faster than a 64-bit key's merge
    # sort (bench/results/cpu-design-choices.txt, "sort"): tracks number in the dozens.
    small = int(track.max()) < (1 << 16) - 1
    order = np.argsort((track + 1).astype(np.uint16) if small else track, kind="stable")
    ordered = track[order]
    cuts = np.flatnonzero(ordered[1:] != ordered[:-1]) + 1
    bounds = [0, *cuts.tolist(), int(order.shape[0])]
    for a, b in itertools.pairwise(bounds):
        if ordered[a] >= 0:
            yield int(ordered[a]), order[a:b]
