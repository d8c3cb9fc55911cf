"""One view read two ways from the same stored jobs, as JSON: through the read engine and
through a ``RecordSet`` (the oracle); and the collector's CLI run without its output."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Sequence

from tfprof.collector.analysis.filters import Filters
from tfprof.collector.analysis.records import prepare
from tfprof.collector.analysis.view_render import JsonReporter
from tfprof.collector.analysis.view_table import read_view_report, view_report
from tfprof.collector.cli import main as collector
from tfprof.collector.jobdata import JobData
from tfprof.collector.lake.reader import open_jobs
from tfprof.collector.read.lake_catalog import catalog
from tfprof.collector.timeline.prepare import TimeWindow
from tfprof.collector.timespec import parse_time


def quiet(argv: list[str]) -> None:
    """``tfprof-collector ARGV`` in this process, its output dropped; it must succeed."""
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        assert collector(argv) == 0


def engine_and_oracle(
    data_dirs: Sequence[str],
    jobs: Sequence[str] | None,
    since: str | None,
    until: str | None,
    view: str,
    *,
    oracle_job: Callable[[JobData], JobData] | None = None,
    host: bool = True,
) -> tuple[str, str]:
    """(the engine's JSON, the RecordSet's JSON) of ``view``; ``since``/``until`` as the
    CLI takes them; the oracle reads each job as ``oracle_job`` makes it, with ``host``
    as ``prepare`` takes it."""
    out = []
    for engine in (True, False):
        stored = open_jobs(data_dirs, jobs)
        first = stored.first_event_ns() if (since or until) else None
        lo = parse_time(since, first, "--since") if since else None
        hi = parse_time(until, first, "--until") if until else None
        if engine:
            report = read_view_report(view, catalog(stored.jobs, TimeWindow(lo, hi)), Filters())
        else:
            read = [oracle_job(j) for j in stored.jobs] if oracle_job else stored.jobs
            report = view_report(view, prepare(read, lo, hi, host=host), Filters())
        text = io.StringIO()
        JsonReporter(report).render(text)
        out.append(text.getvalue())
    return out[0], out[1]
