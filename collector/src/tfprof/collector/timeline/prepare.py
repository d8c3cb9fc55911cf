"""What every reader of stored jobs shares, the export and the analyses: the window
(``TimeWindow``: the export keeps the records that overlap it, whole; the analyses clip
them), the job and task labels exactly as the timeline names them (``job_labels``,
``task_labels``), so a track name means the same thing in every output, the name table
(``NameTable``: names interned once for all streams), the host samples of a window, and
the check of a job built in memory (``check_columns``).

Nothing here makes a Python object per record.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from tfprof.collector.errors import InvalidArgument
from tfprof.collector.jobdata import HOST_COLUMNS, RECORD_COLUMNS, JobData, StreamData


class MergeError(InvalidArgument):
    """The jobs or the options cannot be merged; the message says why."""


@dataclass(frozen=True)
class TimeWindow:
    """``[lo, hi)`` on the collector clock; ``None`` leaves that end open."""

    lo: int | None = None
    hi: int | None = None

    @property
    def is_open(self) -> bool:
        return self.lo is None and self.hi is None

    def overlapping(self, start: np.ndarray, end: np.ndarray) -> np.ndarray | None:
        """Rows whose ``[start, end)`` overlaps the window; None when every row does.

        A zero-length record counts when its instant lies inside ``[lo, hi)``.
        """
        if self.is_open:
            return None
        mask = np.ones(start.shape[0], dtype=bool)
        if self.hi is not None:
            mask &= start < self.hi
        if self.lo is not None:
            mask &= (end > self.lo) | (start >= self.lo)
        return None if mask.all() else np.flatnonzero(mask)

    def holds(self, time: np.ndarray) -> np.ndarray:
        """Which instants lie inside ``[lo, hi)`` (host samples)."""
        mask = np.ones(time.shape[0], dtype=bool)
        if self.lo is not None:
            mask &= time >= self.lo
        if self.hi is not None:
            mask &= time < self.hi
        return mask


def job_labels(jobs: Sequence[JobData]) -> list[str]:
    """The job name, or ``<name>.<run_id>`` when runs share a name, so they never merge."""
    run_ids: dict[str, set[str]] = {}
    for job in jobs:
        run_ids.setdefault(job.name, set()).add(job.run_id)
    labels: list[str] = []
    seen: dict[str, int] = {}
    for job in jobs:
        label = f"{job.name}.{job.run_id}" if len(run_ids[job.name]) > 1 else job.name
        seen[label] = seen.get(label, 0) + 1
        # The same (name, run_id) twice is a store bug; still never merge the two.
        labels.append(label if seen[label] == 1 else f"{label}.{seen[label]}")
    return labels


def task_labels(job: JobData) -> list[str]:
    """Each stream's task label, in ``job.streams`` order.

    Processes of one job that report the same task (a child inheriting its parent's
    RANK) have their own CUDA contexts and streams, so each gets ``<task>.<pid>``
    (``<task>.<host>.<pid>`` when pids repeat across hosts); only streams of the very
    same process (a reconnect) share a label.
    """
    procs: dict[str, list[tuple[str, int]]] = {}
    for stream in job.streams:
        known = procs.setdefault(stream.task, [])
        if (stream.host, stream.pid) not in known:
            known.append((stream.host, stream.pid))
    labels: list[str] = []
    for stream in job.streams:
        known = procs[stream.task]
        if len(known) == 1:
            labels.append(stream.task)
        elif [pid for _, pid in known].count(stream.pid) == 1:
            labels.append(f"{stream.task}.{stream.pid}")
        else:
            labels.append(f"{stream.task}.{stream.host}.{stream.pid}")
    return labels


def check_columns(stream: StreamData) -> int:
    """The number of records; ``MergeError`` when a column is missing or ragged."""
    missing = [c for c in RECORD_COLUMNS if c not in stream.records]
    if missing:
        raise MergeError(f"job {stream.job!r} pid {stream.pid}: records lack {missing}")
    n = int(stream.records["kind"].shape[0])
    ragged = [c for c in RECORD_COLUMNS if stream.records[c].shape != (n,)]
    if ragged:
        raise MergeError(f"job {stream.job!r} pid {stream.pid}: ragged columns {ragged}")
    return n


class NameTable:
    """Names interned once for every stream: a stream's string ids become global ids."""

    def __init__(self, initial: Iterable[str] = ()) -> None:
        self._names: list[str] = []
        self._ids: dict[str, int] = {}
        for name in initial:
            self.intern(name)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._names)

    @property
    def growing(self) -> Sequence[str]:
        """The names as they are now and as they will be: only ever appended to (the
        export's parts share it rather than copy it each time)."""
        return self._names

    def intern(self, name: str) -> int:
        found = self._ids.get(name)
        if found is None:
            found = self._ids[name] = len(self._names)
            self._names.append(name)
        return found

    def intern_column(self, strings: Sequence[str], name: np.ndarray, unnamed: int) -> np.ndarray:
        """Global id per record of the stream-local string ids ``name`` (int32).

        Id 0 and ids past ``strings`` mean "no name" and map to ``unnamed``; names are
        interned in ascending local id order, so the table's order is reproducible.
        """
        n = len(strings)
        # Ids below 1 land on 0 and ids past the strings on n: both stay ``unnamed``.
        idx = np.clip(name, 0, n)
        table = np.full(n + 1, unnamed, dtype=np.int32)
        used = np.flatnonzero(np.bincount(idx, minlength=n + 1)[1:n]) + 1
        for i in used.tolist():
            table[i] = self.intern(strings[i])
        ids: np.ndarray = table[idx]
        return ids


HOST_SERIES: tuple[str, ...] = HOST_COLUMNS[1:]


def host_samples(streams: Iterable[StreamData], window: TimeWindow) -> dict[str, np.ndarray]:
    """The streams' host samples on the collector clock inside the window, in time order."""
    pieces: dict[str, list[np.ndarray]] = {c: [] for c in HOST_COLUMNS}
    for stream in streams:
        samples = stream.host_samples
        time = samples["time_ns"] + np.int64(stream.host_shift_ns)
        inside = window.holds(time)
        pieces["time_ns"].append(time[inside])
        for series in HOST_SERIES:
            pieces[series].append(np.asarray(samples[series])[inside])
    merged = {c: np.concatenate(p) for c, p in pieces.items()}
    order = np.argsort(merged["time_ns"], kind="stable")
    return {c: v[order] for c, v in merged.items()}
