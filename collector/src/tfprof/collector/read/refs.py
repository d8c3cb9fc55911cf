"""Who and what a read covers, named once for every view, rule and export: the jobs
(with what their host samples say and what of them could not be read), the processes
(one per stored stream, labelled as the timeline labels them) and the physical GPUs
(by UUID: CUDA ordinals are per process).

Small values known before any record is read (``lake_catalog``); rows and findings
index them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from tfprof.collector.jobdata import JobData, StreamData
from tfprof.collector.timeline.captured_time import Captured, captured_of
from tfprof.collector.timeline.prepare import TimeWindow, host_samples


@dataclass(frozen=True)
class HostStats:
    """What a job's host samples (taken by the launcher, GPU or not) say in the window."""

    start_ns: int = 0  # first and last sample; 0 when there is none
    end_ns: int = 0
    samples: int = 0
    cpu_percent_mean: float = 0.0  # each process's mean CPU %, summed over processes
    rss_max_bytes: int = 0  # each process's peak RSS, summed over processes


@dataclass(frozen=True)
class JobRef:
    label: str  # the job name, or name.run_id when several runs share a name
    name: str
    run_id: str
    processes: int
    dropped: int
    sources: tuple[str, ...] = ()  # the processes' record sources (cupti, none, replay:...)
    host: HostStats = HostStats()
    # Unreadable parts of the stored job ("<stream>: <what>") and the records they held
    # (None: unknown), so every view says what it could not count.
    skipped: tuple[str, ...] = ()
    lost_records: int | None = 0
    # The windows its processes were traced in (None: traced throughout): idle time,
    # gaps and time at stake count only inside them.
    captured: Captured | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class ProcessRef:
    job: int  # index into the read's jobs
    task: str  # as the timeline labels it
    host: str
    pid: int


@dataclass(frozen=True)
class GpuRef:
    uuid: str
    name: str
    memory_bytes: int = 0  # device memory (DeviceMeta), 0 when unknown


def lost_records(job: JobData) -> int | None:
    """Records in the job's unreadable parts; None when some count is unknown."""
    lost = [s.lost_records for s in job.streams if s.skipped]
    return None if None in lost or job.skipped else sum(n or 0 for n in lost)


def job_ref(job: JobData, label: str, host: HostStats, processes: int | None = None) -> JobRef:
    """The job's ref; ``processes``: its processes (task labels), else its streams."""
    return JobRef(
        label,
        job.name,
        job.run_id,
        len(job.streams) if processes is None else processes,
        job.dropped.total,
        tuple(sorted({s.source for s in job.streams if s.source})),
        host,
        tuple(job.skipped) + tuple(f"{s.task}: {w}" for s in job.streams for w in s.skipped),
        lost_records(job),
        captured_of(job.streams),
    )


@dataclass(frozen=True)
class SampleStats:
    """One stream's host samples in the window: first, last, count, mean CPU, peak RSS."""

    first: int
    last: int
    count: int
    cpu: float
    rss: int


def sample_stats(stream: StreamData, window: TimeWindow) -> SampleStats | None:
    samples = host_samples([stream], window)
    time = samples["time_ns"]
    if not time.shape[0]:
        return None
    return SampleStats(
        int(time[0]),
        int(time[-1]),
        int(time.shape[0]),
        float(samples["cpu_percent"].mean()),
        int(samples["rss_bytes"].max()),
    )


def host_stats(streams: Sequence[SampleStats | None]) -> HostStats:
    """Each process's mean CPU % and peak RSS, summed over the job's processes."""
    found = [s for s in streams if s is not None]
    if not found:
        return HostStats()
    cpu, rss = 0.0, 0
    for s in found:  # in stream order, as the sums always ran
        cpu += s.cpu
        rss += s.rss
    first = min(s.first for s in found)
    last = max(s.last for s in found)
    return HostStats(first, last, sum(s.count for s in found), round(cpu, 2), rss)
