"""What a read covers, known before any record is read: the jobs, their processes, the
GPUs their devices are, and where each process's rows of each record table lie
(published Parquet files, with their footers, and log-tail rows already in memory),
from the lake's small tables only (``lake.reader.open_jobs`` lists them).

Jobs are numbered in ``open_jobs`` order; a job's processes are its task labels as the
timeline labels them (``job_labels``, ``task_labels``), in order of first appearance:
the streams of one process (an agent that reconnected) are one process. GPUs are
numbered later, in the order the read meets them (``engine``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from tfprof.collector.jobdata import JobData, StreamData
from tfprof.collector.lake.fs import Lake
from tfprof.collector.lake.lake_stream import GPU_TABLES, HOST_TABLES, LakeStream, read_host_samples
from tfprof.collector.read.refs import JobRef, ProcessRef, host_stats, job_ref, sample_stats
from tfprof.collector.timeline.prepare import TimeWindow, job_labels, task_labels

# ``steps``: the hook's STEP records, read by SQL only (``clipped_sql``'s ``st``).
RECORD_TABLES = (*GPU_TABLES, *HOST_TABLES, "steps")


@dataclass(frozen=True)
class TableRows:
    """One process's rows of one record table: Parquet files and log-tail rows."""

    table: str
    files: tuple[tuple[Lake, str], ...]
    tails: tuple[pa.Table, ...]


@dataclass(frozen=True)
class Catalog:
    jobs: tuple[JobRef, ...]
    processes: tuple[ProcessRef, ...]
    streams: tuple[StreamData, ...]  # per process: identity and devices, no records
    rows: tuple[dict[str, TableRows], ...]  # per process, by table (tables with rows)
    window: TimeWindow  # --since / --until; None ends are found by the read
    # Processes in the order GPUs are numbered in (a job's, by task label, as the
    # timeline and today's views number them).
    load_order: tuple[int, ...]
    groups: tuple[tuple[LakeStream, ...], ...] = ()  # per process: its stored streams

    @property
    def link_groups(self) -> tuple[int, ...]:
        """Per process, the first process of its job with its task label: the streams of
        one traced process (a reconnect) share CUDA's correlation ids, so launches link
        within such a group (``read.launch_links``)."""
        first: dict[tuple[int, str], int] = {}
        return tuple(first.setdefault((p.job, p.task), i) for i, p in enumerate(self.processes))

    def tables_of(self, process: int, tables: Sequence[str]) -> list[TableRows]:
        mine = self.rows[process]
        return [mine[t] for t in tables if t in mine]

    def host_samples(self, process: int) -> dict[str, np.ndarray]:
        """The process's host samples (a sample a second: small), in time order, on
        the collector clock (``jobdata.HOST_COLUMNS``)."""
        return _samples(self.groups[process])


def catalog(jobs: Sequence[JobData], window: TimeWindow) -> Catalog:
    """The catalog of ``jobs`` (``open_jobs``' lake streams) for ``window``: one process
    per (job, task label), as the timeline has one track group per task: the streams of
    one process (an agent that reconnected) are read as one."""
    refs: list[JobRef] = []
    processes: list[ProcessRef] = []
    streams: list[StreamData] = []
    groups: list[tuple[LakeStream, ...]] = []
    rows: list[dict[str, TableRows]] = []
    for j, (job, label) in enumerate(zip(jobs, job_labels(jobs), strict=True)):
        by_task: dict[str, list[LakeStream]] = {}
        for stream, task in zip(job.streams, task_labels(job), strict=True):
            if not isinstance(stream, LakeStream):
                raise TypeError("the read path reads lake streams (trace files are imported)")
            by_task.setdefault(task, []).append(stream)
        stats = []
        for task, group in by_task.items():
            first = group[0]
            processes.append(ProcessRef(j, task, first.host, first.pid))
            devices = {o: d for s in reversed(group) for o, d in s.devices.items()}
            streams.append(replace(first, devices=devices) if len(group) > 1 else first)
            rows.append(_rows(group))
            groups.append(tuple(group))
            merged = replace(first, host_samples=_samples(group))
            stats.append(sample_stats(merged, window))
        refs.append(job_ref(job, label, host_stats(stats), processes=len(by_task)))
    order = tuple(range(len(processes)))  # a job's processes in task order already
    return Catalog(
        tuple(refs), tuple(processes), tuple(streams), tuple(rows), window, order, tuple(groups)
    )


def _samples(group: Sequence[LakeStream]) -> dict[str, np.ndarray]:
    """The host samples of a process's streams (a sample a second: small), in time order."""
    parts = [read_host_samples(s.parts) for s in group]
    if len(parts) == 1:
        return parts[0]
    merged = {c: np.concatenate([p[c] for p in parts]) for c in parts[0]}
    order = np.argsort(merged["time_ns"], kind="stable")
    return {c: v[order] for c, v in merged.items()}


def _rows(group: Sequence[LakeStream]) -> dict[str, TableRows]:
    found = {}
    for table in RECORD_TABLES:
        files = tuple(
            sorted((f for s in group for f in s.parts.files.get(table, ())), key=lambda f: f[1])
        )
        tails = tuple(t for s in group for t in s.parts.tails.get(table, ()) if t.num_rows)
        if files or tails:
            found[table] = TableRows(table, files, tails)
    return found
