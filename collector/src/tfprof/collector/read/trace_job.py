"""A trace file (embedded mode's output, an export, a Kineto or TF timeline) as a job.

Files are read and turned into streams by the importer (``collector.importer``), like
``import`` and ``merge`` do; a file is one job with one process, on its own clock.

Our own Chrome export says who it came from (``otherData``: jobs, tasks, devices), so a
summary of it keeps that identity: the job's name and run, the task, host and pid, the
GPUs' UUIDs, the source and the dropped counts. It also carries the processes' host
samples (CPU, RSS, ...), which are read back too, so a run without any GPU activity
(no CUDA driver, ``--source none``) still summarises. Other files carry no identity:
they are named after the file, their GPUs after the file's name.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from tfprof.collector.errors import CollectorError, InvalidArgument
from tfprof.collector.jobdata import (
    HOST_COLUMNS,
    DeviceMeta,
    DropCounts,
    JobData,
    StreamData,
    empty_host,
)
from tfprof.collector.store.importer import Loaded, job_name, load_files, stream_from
from tfprof.core.counters import series_of
from tfprof.core.tracks import TrackKey, TrackKind
from tfprof.readers import FORMAT_TFPROF, TraceFormatError, load_events, read_json_trace
from tfprof.readers.event_fields import event_args, us_to_ns
from tfprof.readers.load import json_trace_head
from tfprof.readers.tfprof_chrome import TOOL_NAME, origin_ns
from tfprof.readers.trace import Event, RecordedTrace


def job_from_trace(path: str | os.PathLike[str]) -> JobData:
    where = os.fspath(path)
    if not _starts_like_our_export(where):
        # Read once: a file whose records are not of our format is no export of ours.
        try:
            (loaded,) = load_files([where])
        except CollectorError:
            loaded = None  # reported below, in the same words
        if loaded is not None and loaded.trace.format != FORMAT_TFPROF:
            return _plain_job(where, loaded)
    export = _our_export(where)
    if export is None:
        return _plain_job(where)
    events, meta = export
    try:
        trace: RecordedTrace | None = load_events(where, events, meta)
    except TraceFormatError as exc:
        trace = None  # no GPU events: host samples may still tell something
        if not _host_events(events):
            raise InvalidArgument(str(exc)) from None
    return _job_from_export(where, trace, events, meta)


def _starts_like_our_export(where: str) -> bool:
    try:
        head = json_trace_head(where)
    except OSError:
        return False  # reported by the readers below, in their words
    for key in ("metadata", "otherData"):  # ours name the tool in "metadata" up front
        extra = (head or {}).get(key)
        tool = extra.get("tool") if isinstance(extra, dict) else None
        if isinstance(tool, dict) and tool.get("name") == TOOL_NAME:
            return True
    return False


def _plain_job(where: str, loaded: Loaded | None = None) -> JobData:
    if loaded is None:
        (loaded,) = load_files([where])
    name = job_name(loaded.path)
    stream = stream_from(loaded, name, "file", "0", 0, 0)
    # Such files carry no GPU UUIDs: name the GPUs after the file so two files' GPU 0
    # are not taken for one physical GPU.
    stream.host = name
    return JobData(name=name, run_id="file", streams=[stream])


def _our_export(where: str) -> tuple[list[Event], dict[str, Any]] | None:
    """(events, top-level object) of a JSON file of ours; None for anything else, which
    the format readers then read (and report on) as usual."""
    try:
        events, doc = read_json_trace(where)
    except (OSError, TraceFormatError):
        return None
    other = doc.get("otherData")
    tool = other.get("tool") if isinstance(other, dict) else None
    if not (isinstance(tool, dict) and tool.get("name") == TOOL_NAME):
        return None
    return events, doc


def _job_from_export(
    where: str, trace: RecordedTrace | None, events: list[Event], meta: dict[str, Any]
) -> JobData:
    other: dict[str, Any] = meta["otherData"]
    jobs = [j for j in other.get("jobs") or () if isinstance(j, dict)]
    job = jobs[0] if len(jobs) == 1 else {}
    tasks = [t for t in job.get("tasks") or () if isinstance(t, dict)]
    task = tasks[0] if len(tasks) == 1 else {}
    name = str(job.get("name") or job_name(where))
    label = str(job.get("label") or name)
    if trace is not None:
        stream = stream_from(Loaded(where, trace), name, "file", "0", 0, 0)
    else:
        stream = StreamData(job=name, run_id="file", host="", pid=0, task="0", finished=True)
    stream.run_id = str(job.get("run_id") or "file")
    if task:  # one process: the file says who it was
        stream.task = str(task.get("task", "0"))
        stream.host = str(task.get("host") or name)
        stream.pid = _int(task.get("pid"))
        stream.argv = [str(a) for a in task.get("argv") or ()]
        stream.source = str(task.get("source") or stream.source)
        stream.finished = bool(task.get("finished", True))
        code = task.get("exit_code")
        stream.exit_code = code if isinstance(code, int) else None
        drops = task.get("dropped") or {}
        stream.dropped = DropCounts(*(_int(drops.get(k)) for k in ("queue", "tracer", "relay")))
        devices = ((other.get("devices") or {}).get(label) or {}).get(stream.task) or {}
        stream.devices = _devices(devices, stream.devices)
        stream.capture_windows = _windows(task.get("capture_windows"))
    else:  # several processes in one stream: GPUs named after the file, as for others
        stream.host = job_name(where)
    stream.host_samples = _host_samples(events, origin_ns(meta))
    return JobData(name=name, run_id=stream.run_id, streams=[stream])


def _devices(meta: dict[str, Any], read: dict[int, DeviceMeta]) -> dict[int, DeviceMeta]:
    """The devices the metadata describes (UUIDs included) over those the reader saw."""
    devices = dict(read)
    for ordinal, d in meta.items():
        if not (isinstance(d, dict) and str(ordinal).isdigit()):
            continue
        major, _, minor = str(d.get("compute_capability", "0.0")).partition(".")
        devices[int(ordinal)] = DeviceMeta(
            ordinal=int(ordinal),
            uuid=str(d.get("uuid", "")),
            name=str(d.get("name", "")),
            pci_bus_id=str(d.get("pci_bus_id", "")),
            compute_capability=(_int(major), _int(minor)),
            sm_count=_int(d.get("sm_count")),
            memory_bytes=_int(d.get("memory_bytes")),
        )
    return devices


def _windows(rows: Any) -> list[tuple[str, str, int, int]]:
    """The capture windows our export says the task was traced in (mode, capture ids,
    start, end); none (traced throughout) when it says nothing readable."""
    found = []
    for row in rows if isinstance(rows, list) else ():
        if isinstance(row, list) and len(row) == 4:
            found.append((str(row[0]), str(row[1]), _int(row[2]), _int(row[3])))
    return found


def _host_events(events: list[Event]) -> list[Event]:
    """Counter events on a task's CPU track (``/job:J/task:T/cpu``)."""
    cpu_pids = set()
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            key = TrackKey.search(str(event_args(e).get("name", "")))
            if key is not None and key.kind is TrackKind.CPU:
                cpu_pids.add(e.get("pid"))
    return [e for e in events if e.get("ph") == "C" and e.get("pid") in cpu_pids]


def _host_samples(events: list[Event], origin: int) -> dict[str, np.ndarray]:
    """The CPU tracks' counters back as host-sample columns on the file's clock."""
    rows: dict[int, dict[str, float]] = {}
    for e in _host_events(events):
        for key, value in event_args(e).items():
            series = series_of(str(e.get("name")), key)  # either spelling of ours
            if series not in HOST_COLUMNS[1:] or value is None:
                continue
            try:
                rows.setdefault(origin + us_to_ns(e.get("ts")), {})[series] = float(value)
            except (TypeError, ValueError, ArithmeticError):
                continue  # a counter we cannot read is left out, as the readers do
    if not rows:
        return empty_host()
    times = sorted(rows)
    samples = empty_host()
    samples["time_ns"] = np.array(times, dtype=np.int64)
    for series in HOST_COLUMNS[1:]:
        dtype = samples[series].dtype
        samples[series] = np.array([rows[t].get(series, 0) for t in times]).astype(dtype)
    return samples


def _int(value: Any) -> int:
    try:
        return int(value) if value is not None and not isinstance(value, bool) else 0
    except (TypeError, ValueError):
        return 0
