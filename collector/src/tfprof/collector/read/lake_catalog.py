"""What a read covers, known before any record is read: the jobs, their processes, the
GPUs their devices are, and where each process's rows of each record table lie
(published Parquet files, with their footers, and log-tail rows already in memory),
from the lake's small tables only (``lake.reader.open_jobs`` lists them).

Jobs and processes are numbered in ``open_jobs`` order, one process per stored stream,
labelled as the timeline labels them (``job_labels``, ``task_labels``); GPUs are
numbered later, in the order the read meets them (``engine``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from tfprof.collector.jobdata import JobData, StreamData, empty_host
from tfprof.collector.lake.fs import Lake
from tfprof.collector.lake.reader import GPU_TABLES, HOST_TABLES, LakeStream, read_host_samples
from tfprof.collector.read.refs import JobRef, ProcessRef, host_stats, job_ref, sample_stats
from tfprof.collector.timeline.prepare import TimeWindow, job_labels, task_labels

RECORD_TABLES = (*GPU_TABLES, *HOST_TABLES)


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
    # Processes in the order a job's streams group by task label: the order GPUs are
    # numbered in (as the timeline and today's views number them).
    load_order: tuple[int, ...]

    def tables_of(self, process: int, tables: Sequence[str]) -> list[TableRows]:
        mine = self.rows[process]
        return [mine[t] for t in tables if t in mine]

    def host_samples(self, process: int) -> dict[str, np.ndarray]:
        """The process's host samples (a sample a second: small), in time order, on
        the collector clock (``jobdata.HOST_COLUMNS``)."""
        stream = self.streams[process]
        assert isinstance(stream, LakeStream)
        return read_host_samples(stream.parts)


def catalog(jobs: Sequence[JobData], window: TimeWindow) -> Catalog:
    """The catalog of ``jobs`` (``open_jobs``' lake streams) for ``window``."""
    refs: list[JobRef] = []
    processes: list[ProcessRef] = []
    streams: list[StreamData] = []
    rows: list[dict[str, TableRows]] = []
    order: list[int] = []
    for j, (job, label) in enumerate(zip(jobs, job_labels(jobs), strict=True)):
        stats = []
        by_task: dict[str, list[int]] = {}
        for stream, task in zip(job.streams, task_labels(job), strict=True):
            if not isinstance(stream, LakeStream):
                raise TypeError("the read path reads lake streams (trace files are imported)")
            by_task.setdefault(task, []).append(len(processes))
            processes.append(ProcessRef(j, task, stream.host, stream.pid))
            streams.append(stream)
            rows.append(_rows(stream))
            stream.host_samples = read_host_samples(stream.parts)  # a sample a second
            stats.append(sample_stats(stream, window))
            stream.host_samples = empty_host()
        order += [p for group in by_task.values() for p in group]
        refs.append(job_ref(job, label, host_stats(stats)))
    return Catalog(tuple(refs), tuple(processes), tuple(streams), tuple(rows), window, tuple(order))


def _rows(stream: LakeStream) -> dict[str, TableRows]:
    found = {}
    for table in RECORD_TABLES:
        files = tuple(sorted(stream.parts.files.get(table, ()), key=lambda f: f[1]))
        tails = tuple(t for t in stream.parts.tails.get(table, ()) if t.num_rows)
        if files or tails:
            found[table] = TableRows(table, files, tails)
    return found
