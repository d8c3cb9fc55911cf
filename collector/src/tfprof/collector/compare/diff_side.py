"""One side of a diff: which stored records it reads, and a DuckDB connection to them.

A side is a trace file (any format ``import`` reads), stored for the diff's duration in a
temporary data dir, or, when a data dir applies to the side, what it names there:
``JOB`` (the job's only run), ``JOB/RUN`` or ``capture:ID`` (the streams a capture
reached, inside its window). Every side is then read the same way: SQL over the lake's
tables (``lake.query.Engine``: Parquet segments and the logs not compacted yet), with
``Side.where`` keeping the side's rows, so DuckDB streams them and memory stays bounded
by the aggregates, not by the records.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import duckdb

from tfprof.collector.errors import InvalidArgument, NotFound

CAPTURE_PREFIX = "capture:"


def literal(text: str) -> str:
    """``text`` as a SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


@dataclass(frozen=True)
class Side:
    role: str  # "base" or "test"
    label: str  # as the user named it
    origin: str  # what it is, for people: "trace file X", "job J run R of DIR"
    data_dirs: tuple[str, ...]
    job: str
    run: str
    # A capture's processes, as (host, task); empty: every process of the run.
    processes: tuple[tuple[str, str], ...] = ()
    since_ns: int | None = None  # a capture's window on the collector clock
    until_ns: int | None = None

    @property
    def where(self) -> str:
        """The SQL condition that keeps this side's rows of any record table."""
        parts = [f"job = {literal(self.job)}", f"run = {literal(self.run)}"]
        if self.processes:
            either = " OR ".join(
                f"(host = {literal(h)} AND task = {literal(t)})" for h, t in self.processes
            )
            parts.append(f"({either})")
        if self.since_ns is not None:
            parts.append(f"start_ns >= {int(self.since_ns)}")
        if self.until_ns is not None:
            parts.append(f"start_ns < {int(self.until_ns)}")
        return " AND ".join(parts)

    def connect(self) -> duckdb.DuckDBPyConnection:
        from tfprof.collector.lake.query import Engine

        return Engine(list(self.data_dirs)).readable_connect()


@contextlib.contextmanager
def open_side(role: str, text: str, data_dirs: Sequence[str] | None) -> Iterator[Side]:
    """The side ``text`` names: a selector in ``data_dirs`` when any are given, else a
    trace file (imported into a temporary data dir, removed on exit)."""
    if data_dirs:
        yield stored_side(role, text, tuple(data_dirs))
        return
    path = Path(text)
    if not path.exists():
        raise NotFound(
            f"{role}: no such trace file {text} (to name a stored job, run or capture, "
            f"give --data-dir or --{role}-data-dir)"
        )
    from tfprof.collector.store import Store
    from tfprof.collector.store.importer import import_files, job_name

    with tempfile.TemporaryDirectory(prefix=f"tfprof-diff-{role}-") as tmp:
        job = job_name(str(path))
        run, _ = import_files(Store(tmp), [str(path)], job)
        yield Side(role, text, f"trace file {text}", (tmp,), job, run)


def stored_side(role: str, text: str, data_dirs: tuple[str, ...]) -> Side:
    """``JOB``, ``JOB/RUN`` or ``capture:ID`` in ``data_dirs``."""
    where = ", ".join(data_dirs)
    if text.startswith(CAPTURE_PREFIX):
        return _capture_side(role, text, data_dirs)
    job, _, run = text.partition("/")
    if not job:
        raise InvalidArgument(f"{role}: {text!r} names no job (JOB, JOB/RUN or capture:ID)")
    runs = _runs(data_dirs, job)
    if not runs:
        raise NotFound(f"{role}: no job {job} stored in {where}")
    if run:
        if run not in runs:
            raise NotFound(f"{role}: job {job} has no run {run} in {where}; runs: "
                           f"{', '.join(runs)}")  # fmt: skip
    elif len(runs) > 1:
        raise InvalidArgument(
            f"{role}: job {job} has {len(runs)} runs in {where}; name one as {job}/RUN: "
            f"{', '.join(runs)}"
        )
    else:
        run = runs[0]
    return Side(role, text, f"job {job} run {run} of {where}", data_dirs, job, run)


def _runs(data_dirs: tuple[str, ...], job: str) -> list[str]:
    """The job's runs, latest first (by their streams' first record)."""
    from tfprof.collector.lake.query import Engine

    con = Engine(list(data_dirs)).readable_connect()
    try:
        rows = con.execute(
            "SELECT run, min(first_ns) FROM runs WHERE job = ? GROUP BY run "
            "ORDER BY min(first_ns) DESC NULLS LAST, run DESC",
            [job],
        ).fetchall()
    finally:
        con.close()
    return [str(r[0]) for r in rows]


def _capture_side(role: str, text: str, data_dirs: tuple[str, ...]) -> Side:
    from tfprof.collector.service.capture_windows import CaptureLog

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
    return Side(
        role,
        text,
        f"capture {capture.capture_id} (job {job} run {run}) of {', '.join(data_dirs)}",
        data_dirs,
        job,
        run,
        processes=tuple(sorted({(s.host, s.task) for s in capture.streams})),
        since_ns=capture.start_ns,
        until_ns=capture.start_ns + capture.duration_ns,
    )
