"""What an export of stored jobs covers: the jobs (``--job``), a capture's streams and
window (``--capture``), and the time options as a window on the collector clock. Shared
by the ``export`` command and the collector's Export call (``service/export_child.py``).
"""

from __future__ import annotations

from tfprof.collector.errors import InvalidArgument, NotFound
from tfprof.collector.jobdata import JobData
from tfprof.collector.store.capture_log import CaptureLog, matches
from tfprof.proto import collector_pb2 as pb


def capture_jobs(jobs: list[JobData], capture: pb.Capture) -> list[JobData]:
    """The jobs' streams that ``capture`` asked for (by job and host, as it matched live
    streams); jobs left without one are dropped."""
    request = capture.request
    for job in jobs:
        job.streams = [
            s for s in job.streams if matches(request, pb.CaptureStream(job=s.job, host=s.host))
        ]
    return [job for job in jobs if job.streams]


def find_capture(data_dirs: list[str], capture_id: str) -> pb.Capture:
    for data_dir in data_dirs:
        for capture in CaptureLog(data_dir).read():
            if capture.capture_id == capture_id:
                return capture
    raise NotFound(f"no capture {capture_id} in {', '.join(data_dirs)}")


def capture_window(capture: pb.Capture) -> str:
    """The capture's window in --window's words (collector clock, ns)."""
    return f"@{capture.start_ns}ns:@{capture.start_ns + capture.duration_ns}ns"


def stored_jobs(
    data_dirs: list[str], names: list[str] | None, capture_id: str | None
) -> tuple[list[JobData], str | None]:
    """The stored jobs to export, and the capture's window when ``capture_id`` is given."""
    from tfprof.collector.lake.reader import open_jobs
    from tfprof.collector.terminal import progress

    where = ", ".join(data_dirs)
    capture = find_capture(data_dirs, capture_id) if capture_id else None
    with progress(f"loading {where}"):
        # Segments and log tails, read one process at a time (lake/reader.py).
        jobs = open_jobs(data_dirs, names or (list(capture.request.jobs) if capture else None))
    if not jobs.jobs:
        raise NotFound(f"no jobs stored in {where}")
    if capture is None:
        return jobs.jobs, None
    chosen = capture_jobs(jobs.jobs, capture)
    if not chosen:
        raise NotFound(f"no stream of capture {capture_id} is stored in {where}")
    return chosen, capture_window(capture)


def time_window(
    jobs: list[JobData], window: str | None, since: str | None, until: str | None
) -> tuple[int | None, int | None] | None:
    """The time options as a window on the collector clock (None: everything)."""
    from tfprof.collector.lake.reader import first_event_ns
    from tfprof.collector.timespec import parse_time, parse_window

    if window and (since or until):
        raise InvalidArgument("give --window or --since/--until, not both")
    if window:
        return parse_window(window, first_event_ns(jobs))
    if since or until:
        first = first_event_ns(jobs)
        return (
            parse_time(since, first, "--since") if since else None,
            parse_time(until, first, "--until") if until else None,
        )
    return None
