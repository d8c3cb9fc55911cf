"""Trace files as streams in memory: one per file, or one per (job, task) a file names.

``jobs_from_files`` builds the jobs ``tfprof-collector merge`` and ``export`` read
straight from files; ``stream_from`` and ``task_streams`` make one file's streams.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from tfprof.collector.jobdata import RECORD_COLUMNS, DeviceMeta, JobData, StreamData, empty_host
from tfprof.collector.store.trace_placement import Loaded, load_files, ranked_files, shifts
from tfprof.core.records import RecordKind
from tfprof.readers import RecordedTrace

IMPORT_HOST = "imported"


def _devices(trace: RecordedTrace) -> dict[int, DeviceMeta]:
    return {
        int(d["ordinal"]): DeviceMeta(
            ordinal=int(d["ordinal"]),
            uuid="",
            name=str(d.get("name", "")),
            compute_capability=(
                int(d.get("compute_capability_major", 0)),
                int(d.get("compute_capability_minor", 0)),
            ),
            sm_count=int(d.get("sm_count", 0)),
            memory_bytes=int(d.get("memory_bytes", 0)),
        )
        for d in trace.devices
    }


def job_name(path: str) -> str:
    """A job name from a file name: its stem, in the job-name character set."""
    name = Path(path).name
    for suffix in (".gz", ".json", ".pftrace", ".pbtxt", ".pb", ".trace"):
        name = name.removesuffix(suffix)
    name = re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip("._-")[:64]
    return name or "trace"


def stream_from(f: Loaded, job: str, run_id: str, task: str, pid: int, shift: int) -> StreamData:
    return StreamData(
        job=job,
        run_id=run_id,
        host=IMPORT_HOST,
        pid=pid,
        task=task,
        source=f"import:{f.path}",
        record_shift_ns=f.trace.origin_ns + shift,
        devices=_devices(f.trace),
        strings=list(f.trace.names),
        records={c: np.frombuffer(f.trace.columns[c], dtype=np.int64) for c in RECORD_COLUMNS},
        finished=True,
        exit_code=0,
    )


def task_streams(f: Loaded, shift: int) -> list[StreamData]:
    """The streams of a file that names its tasks (``Loaded.identity``): one per
    (job, task), holding that task's records with its own GPU ordinals, its devices
    and its host samples, on the file's clock plus ``shift``."""
    trace = f.trace
    assert trace.task_index is not None
    index = np.frombuffer(trace.task_index, dtype=np.int64)
    columns = {c: np.frombuffer(trace.columns[c], dtype=np.int64) for c in RECORD_COLUMNS}
    on_gpu = np.isin(columns["kind"], DEVICE_KINDS)
    top = max(trace.gpu_of, default=0) + 1
    gpu_of = np.arange(max(top, int(columns["device"].max(initial=0)) + 1), dtype=np.int64)
    for ordinal, gpu in trace.gpu_of.items():
        gpu_of[ordinal] = gpu
    devices = _devices(trace)
    streams = []
    for t, (job, task) in enumerate(trace.tasks):
        rows = np.flatnonzero(index == t)
        records = {c: v[rows] for c, v in columns.items()}
        records["device"] = np.where(on_gpu[rows], gpu_of[records["device"]], records["device"])
        mine = np.unique(columns["device"][rows[on_gpu[rows]]]).tolist()
        stream = stream_from(f, job, "file", task, 1, shift)
        stream.records = records
        stream.devices = {
            gpu_of[o]: replace(devices[o], ordinal=int(gpu_of[o])) for o in mine if o in devices
        }
        stream.host_samples = _host_samples(trace.host_samples.get(t, {}))
        stream.host_shift_ns = stream.record_shift_ns  # samples are on the records' clock
        streams.append(stream)
    return streams


DEVICE_KINDS = (
    RecordKind.KERNEL, RecordKind.MEMCPY, RecordKind.MEMSET, RecordKind.SYNC, RecordKind.MEMORY
)  # fmt: skip


def _host_samples(read: dict[str, list[float]]) -> dict[str, np.ndarray]:
    """A task's host samples as read (``RecordedTrace.host_samples``) as columns; a
    series the file did not hold reads 0."""
    samples = empty_host()
    count = len(read.get("time_ns", ()))
    for column, empty in samples.items():
        if count:
            samples[column] = np.asarray(read.get(column) or [0] * count, dtype=empty.dtype)
    return samples


def jobs_from_files(
    paths: Sequence[str | os.PathLike[str]], as_steps: bool, shift: str = "auto"
) -> list[JobData]:
    """Files as jobs for ``build_timeline``: steps (one after another, sharing tracks)
    or one job each. Files that name their job and tasks keep them (``task_streams``):
    as steps, the streams of a (job, task) named by several files are that task's steps;
    as jobs, a job a later file names again is told apart by a suffix (``.2``). Other
    files are named after the file: as steps, all of them after the first one."""
    files = load_files(paths)
    if as_steps:
        ranked_files(files)  # the ranks of one job: a task each
    offsets = shifts(files, shift, as_steps)
    jobs: dict[str, JobData] = {}
    fallback = job_name(files[0].path)
    for f, s in zip(files, offsets, strict=True):
        if f.trace.tasks:
            streams = task_streams(f, s)
        else:
            name = fallback if as_steps else job_name(f.path)
            task = f.task if as_steps and f.ranked else "0"
            streams = [stream_from(f, name, "file", task, 1, s)]
        if not as_steps:
            renamed = {job: unused_name(job, jobs) for job in dict.fromkeys(s.job for s in streams)}
            for stream in streams:
                stream.job = renamed[stream.job]
        for stream in streams:
            jobs.setdefault(stream.job, JobData(name=stream.job, run_id="file"))
            jobs[stream.job].streams.append(stream)
    return list(jobs.values())


def unused_name(name: str, taken: Mapping[str, object]) -> str:
    """``name``, or ``name.N`` with the first N from 2 that no job has yet."""
    n = 1
    found = name
    while found in taken:
        n += 1
        found = f"{name}.{n}"
    return found
