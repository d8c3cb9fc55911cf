"""A trace file (embedded mode's output, an export, a Kineto or TF timeline) as a job.

The file is read by ``collector.traces.read_trace`` (the replay importer of
agent/sources/recorded.py for JSON, plus Perfetto and StepStats); this only wraps its
columns, without copying, in a ``JobData``. A file is one job with one process: an
export of several jobs keeps their GPUs apart (each (job, task, gpu) is its own device)
but not their names.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from tfprof.agent.sources.recorded import TraceFormatError
from tfprof.collector.analysis.errors import AnalysisError
from tfprof.collector.errors import NotFound
from tfprof.collector.model import RECORD_COLUMNS, DeviceMeta, JobData, StreamData
from tfprof.collector.traces import read_trace


def job_name(path: str | os.PathLike[str]) -> str:
    name = Path(path).name
    for suffix in (".gz", ".json", ".trace"):
        name = name.removesuffix(suffix)
    return name or "trace"


def job_from_trace(path: str | os.PathLike[str]) -> JobData:
    try:
        trace = read_trace(path)  # every format import knows, .pftrace and StepStats too
    except FileNotFoundError:
        raise NotFound(f"no such trace file: {os.fspath(path)}") from None
    except TraceFormatError as exc:
        raise AnalysisError(str(exc)) from None
    records = {c: np.frombuffer(trace.columns[c], dtype=np.int64) for c in RECORD_COLUMNS}
    name = job_name(path)
    devices = {
        int(d["ordinal"]): DeviceMeta(
            ordinal=int(d["ordinal"]),
            uuid="",  # files carry no UUID: GPUs are told apart by ordinal
            name=str(d.get("name", "")),
            sm_count=int(d.get("sm_count", 0)),
            memory_bytes=int(d.get("memory_bytes", 0)),
        )
        for d in trace.devices
    }
    stream = StreamData(
        job=name,
        run_id="file",
        host=name,
        pid=0,
        task="0",
        source=f"file:{os.fspath(path)}",
        record_shift_ns=int(getattr(trace, "origin_ns", 0)),
        devices=devices,
        strings=list(trace.names),
        records=records,
        finished=True,
    )
    return JobData(name=name, run_id="file", streams=[stream])
