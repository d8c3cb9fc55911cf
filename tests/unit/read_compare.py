"""One view read from stored jobs through the read engine, as JSON, and read again with
chunks small enough that state is carried often (``chunked``): the two must agree; and
the collector's CLI run without its output."""

from __future__ import annotations

import contextlib
import io
import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest

from tfprof.collector.analysis.filters import Filters
from tfprof.collector.analysis.view_render import JsonReporter
from tfprof.collector.analysis.view_table import read_view_report
from tfprof.collector.cli import main as collector
from tfprof.collector.lake.reader import open_jobs
from tfprof.collector.read import time_chunks
from tfprof.collector.read.lake_catalog import catalog
from tfprof.collector.store import Store
from tfprof.collector.store.importer import import_files
from tfprof.collector.timeline.prepare import TimeWindow
from tfprof.collector.timespec import parse_time


def quiet(argv: list[str]) -> None:
    """``tfprof-collector ARGV`` in this process, its output dropped; it must succeed."""
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        assert collector(argv) == 0


def logs_and_compacted(data_dir: Path, tmp_path: Path, trace: Path, job: str) -> tuple[Path, Path]:
    """Two copies of ``data_dir``, the second compacted into its lake, and ``trace``
    imported into both as one more run in the log (under one run id: the job's label
    names it): the same data as log tails only, and as segments and tails at once."""
    logs, both = tmp_path / "logs", tmp_path / "data"
    for d, compact in ((logs, False), (both, True)):
        shutil.copytree(data_dir, d)
        if compact:
            quiet(["compact", "--data-dir", str(d)])
        import_files(Store(d), [trace], job, run_id=f"{job}-late")
    return logs, both


def engine_json(
    data_dirs: Sequence[str],
    jobs: Sequence[str] | None,
    since: str | None,
    until: str | None,
    view: str,
) -> str:
    """The JSON of ``view`` as ``summary --data-dir`` reads it; ``since``/``until`` as the
    CLI takes them."""
    stored = open_jobs(data_dirs, jobs)
    first = stored.first_event_ns() if (since or until) else None
    lo = parse_time(since, first, "--since") if since else None
    hi = parse_time(until, first, "--until") if until else None
    report = read_view_report(view, catalog(stored.jobs, TimeWindow(lo, hi)), Filters())
    text = io.StringIO()
    JsonReporter(report).render(text)
    return text.getvalue()


def whole_and_chunked(
    monkeypatch: pytest.MonkeyPatch,
    chunk_rows: int,
    data_dirs: Sequence[str],
    jobs: Sequence[str] | None,
    since: str | None,
    until: str | None,
    view: str,
    batch_rows: int | None = None,
) -> tuple[str, str]:
    """(``engine_json`` with the read's own chunk sizes, with chunks of ``chunk_rows``
    rows and, given, row-group batches of ``batch_rows``): what every sweep carries from
    chunk to chunk must not change a figure."""
    with monkeypatch.context() as m:
        m.setattr(time_chunks, "CHUNK_ROWS", 1 << 30)  # every process in one chunk
        m.setattr(time_chunks, "BATCH_ROWS", 1 << 30)
        whole = engine_json(data_dirs, jobs, since, until, view)
    with monkeypatch.context() as m:
        m.setattr(time_chunks, "CHUNK_ROWS", chunk_rows)
        if batch_rows is not None:
            m.setattr(time_chunks, "BATCH_ROWS", batch_rows)
        chunked = engine_json(data_dirs, jobs, since, until, view)
    return whole, chunked
