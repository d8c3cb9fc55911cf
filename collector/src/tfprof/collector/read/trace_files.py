"""Trace files read the way stored jobs are: each imported into a lake held in memory.

A file (embedded mode's output, an export of ours, a Kineto or TF timeline trace) is
read by the importer and given its identity by ``read.trace_job`` (our own export
says its job, run, task, host, pid, GPUs and host samples; other files are named after
the file, their GPUs too), then converted into the lake's tables exactly as compaction
converts a stream's batches (``lake.convert.lake_table``) and handed to the read as a
stream whose rows are all log-tail rows: every summary and rule then reads a file
through the same catalog, SQL and sweep as a data dir. Nothing is written to disk (the
records are in memory already, read from the file).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from tfprof.collector.errors import InvalidArgument
from tfprof.collector.jobdata import JobData, StreamData
from tfprof.collector.lake.convert import OutOfRange, lake_table
from tfprof.collector.lake.lake_stream import LakeStream
from tfprof.collector.lake.reader import LakeJobs
from tfprof.collector.lake.schema import HOST_SAMPLES, RECORD_TABLES
from tfprof.collector.lake.stream_parts import StreamParts
from tfprof.collector.store.traced_windows import ALWAYS


def read_trace_files(paths: Sequence[str | os.PathLike[str]]) -> LakeJobs:
    """Each file as one job of lake streams (its identity as ``job_from_trace`` gives it)."""
    from tfprof.collector.read.trace_job import job_from_trace

    jobs = []
    for path in paths:
        job = job_from_trace(path)
        lake_job = JobData(name=job.name, run_id=job.run_id, skipped=list(job.skipped))
        for i, stream in enumerate(job.streams):
            try:
                lake_job.streams.append(_lake_stream(stream, f"file-{i}"))
            except OutOfRange as exc:
                raise InvalidArgument(f"{os.fspath(path)}: {exc}") from None
        jobs.append(lake_job)
    return LakeJobs(jobs, [])


def _lake_stream(stream: StreamData, stream_id: str) -> LakeStream:
    """``stream`` as a lake stream whose rows are in memory (times on the collector
    clock, as the lake holds them)."""
    identity = {"stream_id": stream_id, "host": stream.host, "task": stream.task}
    strings = list(stream.strings)
    parts = StreamParts()
    records = stream.records
    kinds = records["kind"]
    for kind, table in RECORD_TABLES.items():
        rows = np.flatnonzero(kinds == kind)
        if not rows.shape[0]:
            continue
        cols = {c: v[rows] for c, v in records.items()}
        cols["start_ns"] = cols["start_ns"] + np.int64(stream.record_shift_ns)
        parts.tails[table.name] = [lake_table(table, cols, identity, strings)]
    if stream.capture_windows:  # the file says when it was traced (our own export)
        capture_windows = list(stream.capture_windows)
    elif kinds.shape[0]:  # traced throughout: one window, its span
        start = records["start_ns"] + np.int64(stream.record_shift_ns)
        end = start + np.maximum(records["duration_ns"], 0)
        span = (int(start.min()), int(end.max()))
        capture_windows = [(ALWAYS, "", *span)]
    else:
        capture_windows = []
    samples = dict(stream.host_samples)
    if samples["time_ns"].shape[0]:
        samples["time_ns"] = samples["time_ns"] + np.int64(stream.host_shift_ns)
        parts.tails[HOST_SAMPLES.name] = [lake_table(HOST_SAMPLES, samples, identity, strings)]
    lake = LakeStream(
        job=stream.job,
        run_id=stream.run_id,
        host=stream.host,
        pid=stream.pid,
        task=stream.task,
        argv=list(stream.argv),
        source=stream.source,
        clock_rtt_ns=stream.clock_rtt_ns,
        applied_shifts_ns=(stream.record_shift_ns, stream.host_shift_ns),
        devices=dict(stream.devices),
        dropped=stream.dropped,
        finished=stream.finished,
        exit_code=stream.exit_code,
        skipped=list(stream.skipped),
        lost_records=stream.lost_records,
        capture_windows=capture_windows,
        parts=parts,
    )
    return lake


def lake_jobs(jobs: Sequence[JobData]) -> list[JobData]:
    """Jobs read from trace files (``store.importer.jobs_from_files``: in memory) as
    jobs of lake streams, their rows in memory: what the read engine reads."""
    out = []
    for job in jobs:
        lake_job = JobData(name=job.name, run_id=job.run_id, skipped=list(job.skipped))
        for i, stream in enumerate(job.streams):
            try:
                lake_job.streams.append(_lake_stream(stream, f"file-{i}"))
            except OutOfRange as exc:
                raise InvalidArgument(f"job {job.name}: {exc}") from None
        out.append(lake_job)
    return out
