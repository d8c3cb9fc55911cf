"""Arguments shared by ``summary`` and ``advise``: what to analyse (trace files or a
data dir with --job), the time window, the output format and file."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, TextIO

from tfprof.collector.errors import AnalysisError, InvalidArgument, NotFound, PathError
from tfprof.collector.timespec import TIME_HELP

if TYPE_CHECKING:  # the parser is built for every command: what reads records comes later
    from tfprof.collector.jobdata import JobData
    from tfprof.collector.read.lake_catalog import Catalog


def add_input_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "files",
        nargs="*",
        metavar="FILE",
        help="trace file(s) to analyse instead of a data dir: embedded mode's output, an "
        "export, or a Kineto / TF timeline trace (.json or .json.gz); each file is one job",
    )
    p.add_argument(
        "--data-dir",
        action="append",
        metavar="DIR",
        help="collector data dir to analyse (never created); also a lake directory or URL "
        "(file://, s3://, gs://); repeat to analyse several as one timeline (default: none)",
    )
    p.add_argument(
        "--job", action="append", metavar="NAME", help="job to include (repeatable; default: all)"
    )
    p.add_argument("--since", metavar="TIME", help=f"analyse from this time: {TIME_HELP}")
    p.add_argument("--until", metavar="TIME", help=f"analyse up to this time: {TIME_HELP}")
    p.add_argument(
        "--format",
        choices=("table", "json", "csv"),
        default="table",
        help="table (aligned, colour only on a terminal, NO_COLOR respected), json or csv "
        "(default: table)",
    )
    p.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")


def load_catalog(args: argparse.Namespace) -> Catalog:
    """What the read engine reads: the jobs' streams, listed, none of their records."""
    from tfprof.collector.read.lake_catalog import catalog
    from tfprof.collector.terminal import progress
    from tfprof.collector.timeline.prepare import TimeWindow

    with progress("loading"):
        jobs, since, until = _jobs(args)
        _check_window(since, until)
        return catalog(jobs, TimeWindow(since, until))


def _check_window(since: int | None, until: int | None) -> None:
    if since is not None and until is not None and since >= until:
        raise AnalysisError(f"the window is empty: since {since} >= until {until} (ns)")


def _jobs(args: argparse.Namespace) -> tuple[list[JobData], int | None, int | None]:
    """The jobs to analyse (opened, not read) and the window's bounds."""
    from tfprof.collector.timespec import parse_time

    if args.files and args.data_dir:
        raise InvalidArgument("give trace FILEs or --data-dir, not both")
    if args.files:
        if args.job:
            raise InvalidArgument("--job selects jobs of a --data-dir; a FILE is one job")
        from tfprof.collector.read.trace_files import read_trace_files

        # Each file imported into a lake in memory: read as a data dir is.
        stored = read_trace_files(args.files)
        jobs = stored.jobs
        first = stored.first_event_ns() if (args.since or args.until) else None
    elif args.data_dir:
        from tfprof.collector.lake.reader import open_jobs

        # Segments and log tails, one process at a time (lake/reader.py).
        stored = open_jobs(args.data_dir, args.job or None)
        jobs = stored.jobs
        if not jobs:
            raise NotFound(f"no jobs stored in {', '.join(args.data_dir)}")
        first = stored.first_event_ns() if (args.since or args.until) else None
    else:
        raise InvalidArgument("nothing to analyse: give trace FILE(s) or --data-dir DIR")
    since = parse_time(args.since, first, "--since") if args.since else None
    until = parse_time(args.until, first, "--until") if args.until else None
    return jobs, since, until


@contextlib.contextmanager
def output(path: str | None) -> Iterator[TextIO]:
    """Stdout, or the ``--output`` file; a file that cannot be written is a ``PathError``."""
    if path is None:
        yield sys.stdout
        return
    try:
        f = open(path, "w", encoding="utf-8", newline="")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise PathError.from_os("output file", path, exc) from exc
    with f:
        try:
            yield f
        except OSError as exc:  # only the report is written in here: a full disk, ...
            raise PathError.from_os("output file", path, exc) from exc
