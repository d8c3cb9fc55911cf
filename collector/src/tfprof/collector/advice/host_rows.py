"""The host rows the host rules read, chosen one process at a time while ``prepare``
loads it (``prepare(jobs, select=HostRows())``), so that no one holds every process's
host side at once:

- every synchronising API call (sync-per-step; host-stalls' time in sync calls);
- every step range, and, in a process without any, every outermost range holding one
  of the process's synchronising calls: sync-per-step's steps (an outermost range
  without a call counts for nothing there, and a job with step ranges uses those only);
- every MEMORY record (memory-capacity);
- ``prepare`` itself keeps every API call that launched a GPU record (launch-bound).

Of the other API calls only each process's union of intervals is kept, merged per job
at the end: host-stalls' time in CUDA calls (``api_cover``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tfprof.collector.advice.host_calls import ApiCover, is_sync_call
from tfprof.collector.advice.sync_per_step import is_step, outermost
from tfprof.collector.analysis.intervals import merge_intervals
from tfprof.collector.analysis.records import ProcessHost
from tfprof.core.records import RecordKind


class HostRows:
    """A ``HostSelector`` for the host rules; ``api_cover`` once every process is seen."""

    def __init__(self) -> None:
        self._sync = np.zeros(0, dtype=bool)  # per names id: a synchronising call
        self._step = np.zeros(0, dtype=bool)  # per names id: a step range
        self._job: list[np.ndarray] = []  # per process: its API calls' union
        self._start: list[np.ndarray] = []
        self._end: list[np.ndarray] = []
        self._jobs: set[int] = set()

    def _learn(self, names: Sequence[str]) -> None:
        known = self._sync.shape[0]
        if len(names) > known:
            new = names[known:]
            self._sync = np.concatenate([self._sync, is_sync_call(new)])
            self._step = np.concatenate([self._step, is_step(new)])

    def __call__(self, rows: ProcessHost) -> np.ndarray:
        self._learn(rows.names)
        c = rows.columns
        kind, name, start, end = c["kind"], c["name"], c["start"], c["end"]
        api = kind == RecordKind.API
        calls = np.flatnonzero(api)
        if calls.shape[0]:
            union = merge_intervals(
                np.zeros(calls.shape[0], dtype=np.int64), start[calls], end[calls], 1
            )
            job = int(c["job"][calls[0]])  # one process, one job
            self._job.append(np.full(union.start.shape[0], job, dtype=np.int64))
            self._start.append(union.start)
            self._end.append(union.end)
            self._jobs.add(job)
        sync = api & self._sync[name]
        ranges = (kind == RecordKind.MARKER) & (c["thread"] != 0)
        steps = ranges & self._step[name]
        keep: np.ndarray = sync | steps | (kind == RecordKind.MEMORY)
        if steps.any():
            return keep
        # A range around one holding a call holds it too: the outermost ranges holding
        # a call are the outermost of those holding one (far fewer than all ranges).
        r = np.flatnonzero(ranges)
        calls = np.sort(start[sync])
        held = r[
            np.searchsorted(calls, end[r], side="right")
            > np.searchsorted(calls, start[r], side="left")
        ]
        keep[held[outermost(c["thread"][held] & 0xFFFFFFFF, start[held], end[held])]] = True
        return keep

    def api_cover(self, num_jobs: int) -> ApiCover:
        """Each job's time in API calls over every process seen."""
        if not self._job:
            empty = np.zeros(0, dtype=np.int64)
            return ApiCover(merge_intervals(empty, empty, empty, num_jobs), frozenset())
        merged = merge_intervals(
            np.concatenate(self._job),
            np.concatenate(self._start),
            np.concatenate(self._end),
            num_jobs,
        )
        return ApiCover(merged, frozenset(self._jobs))
