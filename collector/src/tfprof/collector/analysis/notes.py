"""Plain sentences about what a read's jobs lack, shown above every view and advice.

A run without GPU activity is not an error: the job ran, its host samples say how long
and how hard, and the note says why no GPU record is there.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from tfprof.collector.read.refs import JobRef


def _reason(job: JobRef) -> str:
    if job.sources and all(s == "none" for s in job.sources):
        return "GPU tracing was off (source none: no CUDA driver found, or --source none)"
    return "no kernel, copy or memset ran in the window"


def _host(job: JobRef) -> str:
    h = job.host
    if not h.samples:
        return "no host samples either"
    seconds = (h.end_ns - h.start_ns) / 1e9
    return (
        f"host samples: {seconds:,.1f} s, CPU {h.cpu_percent_mean:,.1f} % mean, "
        f"RSS {h.rss_max_bytes / 2**20:,.1f} MiB peak"
    )


def _damaged(job: JobRef) -> str:
    lost = "an unknown number of" if job.lost_records is None else f"{job.lost_records:,}"
    return (
        f"job {job.label}: {lost} records could not be read from the store and are not"
        f" counted here: {'; '.join(job.skipped)}"
    )


def job_notes(jobs: Sequence[JobRef], with_records: Collection[int]) -> tuple[str, ...]:
    """One line per job with no GPU record in the window (why, and what the host did),
    and one per job whose stored data was partly unreadable (what, and how much)."""
    lines = [
        f"job {job.label}: no GPU activity was recorded: {_reason(job)}; {_host(job)}"
        for j, job in enumerate(jobs)
        if j not in with_records
    ]
    lines += [_damaged(job) for job in jobs if job.skipped]
    return tuple(lines)
