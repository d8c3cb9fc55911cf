"""The ``streams`` view: per (job, task, device, stream), how long the stream was busy
(the union of its records' intervals, so overlapping work counts once) and what ran.

``StreamsNeed`` reads it through the read engine (counts from SQL, busy from a sweep)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tfprof.collector.analysis.units import pct, us
from tfprof.collector.read.gpu_sweeps import StreamBusy
from tfprof.collector.read.needs import Got, Query, Sweep
from tfprof.core.tracks import TrackKey

NAME_FIELD = "track"
TIME_FIELD = "busy_us"


@dataclass(frozen=True)
class StreamRow:
    track: str  # /job:J/task:T/gpu:N/stream:M (stream:none), as on the timeline
    job: str
    task: str
    pid: int
    device: int  # CUDA ordinal inside the process
    gpu_uuid: str
    stream: int  # 4294967295 (SYNC_NO_STREAM): context-wide synchronisations
    busy_us: float  # union of kernel, copy and memset intervals
    # Of the analysis window's captured time: all of it unless the process was traced in
    # windows (on-demand, periodic).
    busy_pct: float
    kernels: int
    copies: int
    memsets: int
    syncs: int
    sync_us: float  # summed duration of host waits on this stream


_COUNTS = Query("""
SELECT process, device, stream, count(*) FILTER (kind = 1), count(*) FILTER (kind = 2),
       count(*) FILTER (kind = 3), count(*) FILTER (kind = 4),
       coalesce(sum(d) FILTER (kind = 4), 0)
FROM {g} GROUP BY ALL""")


@dataclass(frozen=True)
class StreamsNeed:
    def queries(self) -> Sequence[Query]:
        return (_COUNTS,)

    def sweeps(self) -> Sequence[Sweep[Any]]:
        return (StreamBusy(),)

    def build(self, got: Got) -> list[StreamRow]:
        read = got.read
        busy = got.swept(StreamBusy())
        rows = []
        for process, device, stream, kernels, copies, memsets, syncs, sync_ns in got.rows(_COUNTS):
            ref = read.processes[process]
            b, captured = busy.get((process, device, stream), (0, read.window_ns))
            label = read.jobs[ref.job].label
            rows.append(
                StreamRow(
                    track=TrackKey.for_stream(label, ref.task, device, stream).format(),
                    job=label,
                    task=ref.task,
                    pid=ref.pid,
                    device=device,
                    gpu_uuid=read.gpus[read.gpu_of[(process, device)]].uuid,
                    stream=stream,
                    busy_us=us(b),
                    busy_pct=pct(b, captured),
                    kernels=kernels,
                    copies=copies,
                    memsets=memsets,
                    syncs=syncs,
                    sync_us=us(int(sync_ns)),
                )
            )
        rows.sort(key=lambda r: (-r.busy_us, r.track))
        return rows
