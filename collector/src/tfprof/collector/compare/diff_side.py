"""One side of a diff: the read engine's catalog of what it reads.

A side is a trace file (any format ``import`` reads, imported into a lake held in
memory: ``read.trace_files``), or, when a data dir applies to the side, what it names
there: ``JOB`` (the job's only run), ``JOB/RUN`` or ``capture:ID`` (the processes a
capture reached, inside its window). Every side is then read the same way, by the read
engine (``read.engine``): SQL over its clipped relations, so memory holds the groups,
never the records.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tfprof.collector.errors import InvalidArgument, NotFound
from tfprof.collector.read.lake_catalog import Catalog, catalog
from tfprof.collector.timeline.prepare import TimeWindow

CAPTURE_PREFIX = "capture:"


@dataclass(frozen=True)
class Side:
    role: str  # "base" or "test"
    label: str  # as the user named it
    origin: str  # what it is, for people: "trace file X", "job J run R of DIR"
    job: str
    run: str
    catalog: Catalog


def open_side(role: str, text: str, data_dirs: Sequence[str] | None) -> Side:
    """The side ``text`` names: a selector in ``data_dirs`` when any are given, else a
    trace file."""
    if data_dirs:
        return stored_side(role, text, tuple(data_dirs))
    if not Path(text).exists():
        raise NotFound(
            f"{role}: no such trace file {text} (to name a stored job, run or capture, "
            f"give --data-dir or --{role}-data-dir)"
        )
    from tfprof.collector.read.trace_files import read_trace_files

    (job,) = read_trace_files([text]).jobs
    cat = catalog([job], TimeWindow())
    return Side(role, text, f"trace file {text}", job.name, job.run_id, cat)


def stored_side(role: str, text: str, data_dirs: tuple[str, ...]) -> Side:
    """``JOB``, ``JOB/RUN`` or ``capture:ID`` in ``data_dirs``."""
    from tfprof.collector.lake.reader import open_jobs

    where = ", ".join(data_dirs)
    window = TimeWindow()
    processes: frozenset[tuple[str, str]] = frozenset()
    if text.startswith(CAPTURE_PREFIX):
        job, run, window, processes, capture_id = _capture(role, text, data_dirs)
        origin = f"capture {capture_id} (job {job} run {run}) of {where}"
    else:
        job, _, run = text.partition("/")
        if not job:
            raise InvalidArgument(f"{role}: {text!r} names no job (JOB, JOB/RUN or capture:ID)")
        origin = ""
    runs = {j.run_id: j for j in open_jobs(list(data_dirs), [job]).jobs if j.name == job}
    if not runs:
        raise NotFound(f"{role}: no job {job} stored in {where}")
    if not run:
        if len(runs) > 1:
            raise InvalidArgument(
                f"{role}: job {job} has {len(runs)} runs in {where}; name one as {job}/RUN: "
                f"{', '.join(sorted(runs))}"
            )
        (run,) = runs
    if run not in runs:
        raise NotFound(
            f"{role}: job {job} has no run {run} in {where}; runs: {', '.join(sorted(runs))}"
        )
    chosen = runs[run]
    if processes:
        chosen.streams = [s for s in chosen.streams if (s.host, s.task) in processes]
        if not chosen.streams:
            raise NotFound(f"{role}: no process of {text} is stored in {where}")
    origin = origin or f"job {job} run {run} of {where}"
    return Side(role, text, origin, job, run, catalog([chosen], window))


def _capture(
    role: str, text: str, data_dirs: tuple[str, ...]
) -> tuple[str, str, TimeWindow, frozenset[tuple[str, str]], str]:
    """The capture's job, run, window and (host, task) processes."""
    from tfprof.collector.store.capture_log import CaptureLog

    wanted = text[len(CAPTURE_PREFIX) :]
    found = [c for d in data_dirs for c in CaptureLog(d).read() if c.capture_id == wanted]
    if not found:
        raise NotFound(f"{role}: no capture {wanted} in {', '.join(data_dirs)}")
    capture = found[0]
    reached = {(s.job, s.run_id) for s in capture.streams}
    if len(reached) != 1:
        raise InvalidArgument(
            f"{role}: capture {capture.capture_id} reached {len(reached)} job runs; a side "
            "of a diff is one run"
        )
    ((job, run),) = reached
    window = TimeWindow(capture.start_ns, capture.start_ns + capture.duration_ns)
    processes = frozenset((s.host, s.task) for s in capture.streams)
    return job, run, window, processes, capture.capture_id
