"""Hand-made jobs (``analysis_data``) as the read engine reads stored jobs: converted
into lake streams held in memory, as trace files are (``read.trace_files``), or stored
in a data dir the way ``import`` stores a trace (the store's ``StreamWriter``); and
their ``summary`` views read that way (``report_of``, ``rows_of``)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tfprof.collector.analysis.filters import Filters
from tfprof.collector.analysis.view_render import ViewReport
from tfprof.collector.analysis.view_table import read_view_report
from tfprof.collector.jobdata import JobData
from tfprof.collector.lake.reader import open_jobs
from tfprof.collector.read.lake_catalog import Catalog, catalog
from tfprof.collector.read.trace_files import _lake_stream
from tfprof.collector.store import Store
from tfprof.collector.store.importer import _write_stream
from tfprof.collector.timeline.prepare import TimeWindow

_DIRS = itertools.count()


def lake_jobs(jobs: Sequence[JobData]) -> list[JobData]:
    """``jobs`` with each stream converted into a lake stream of log-tail rows."""
    return [
        JobData(name=j.name, run_id=j.run_id, skipped=list(j.skipped),
                streams=[_lake_stream(s, f"s{i}") for i, s in enumerate(j.streams)])
        for j in jobs
    ]  # fmt: skip


def catalog_of(
    jobs: Sequence[JobData], since: int | None = None, until: int | None = None
) -> Catalog:
    """The read engine's catalog of hand-made ``jobs`` (in memory, in their order)."""
    return catalog(lake_jobs(jobs), TimeWindow(since, until))


def store_jobs(data_dir: Path, jobs: Sequence[JobData]) -> Path:
    """Write each job's streams (in order) into ``data_dir``."""
    store = Store(str(data_dir))
    for job in jobs:
        for i, stream in enumerate(job.streams):
            _write_stream(store, stream, f"s{i}")
    return data_dir


def stored_catalog(
    tmp: Path, jobs: Sequence[JobData], since: int | None = None, until: int | None = None
) -> Catalog:
    """The read engine's catalog of ``jobs`` stored in a fresh data dir under ``tmp``."""
    d = store_jobs(tmp / f"stored-{next(_DIRS)}", jobs)
    return catalog(open_jobs([str(d)]).jobs, TimeWindow(since, until))


def report_of(
    view: str,
    jobs: Sequence[JobData],
    since: int | None = None,
    until: int | None = None,
    filters: Filters | None = None,
) -> ViewReport:
    """The ``summary`` view ``view`` of hand-made ``jobs``, read through the read engine."""
    return read_view_report(view, catalog_of(jobs, since, until), filters)


def rows_of(
    view: str, jobs: Sequence[JobData], since: int | None = None, until: int | None = None
) -> list[Any]:
    """The rows of ``report_of``, unfiltered."""
    return list(report_of(view, jobs, since, until).rows)
