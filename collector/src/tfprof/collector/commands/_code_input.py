"""What the code views and flame graphs read: a DuckDB connection over the lake of the
data dirs named, or over trace files imported into a temporary data dir (their Python
stacks too), and the scope (jobs, window) to read."""

from __future__ import annotations

import argparse
import contextlib
import tempfile
from collections.abc import Iterator

import duckdb

from tfprof.collector.analysis.code_sql import Scope
from tfprof.collector.errors import InvalidArgument, NotFound


@contextlib.contextmanager
def code_connection(args: argparse.Namespace) -> Iterator[tuple[duckdb.DuckDBPyConnection, Scope]]:
    """The lake of ``args.files`` or ``args.data_dir``, and the scope of --job,
    --since and --until."""
    from tfprof.collector.lake.query import Engine

    if args.files and args.data_dir:
        raise InvalidArgument("give trace FILEs or --data-dir, not both")
    if not args.files and not args.data_dir:
        raise InvalidArgument("nothing to analyse: give trace FILE(s) or --data-dir DIR")
    if args.files and getattr(args, "job", None):
        raise InvalidArgument("--job selects jobs of a --data-dir; a FILE is one job")
    with contextlib.ExitStack() as stack:
        if args.files:
            root = stack.enter_context(tempfile.TemporaryDirectory(prefix="tfprof-code-"))
            _import(args.files, root)
            sources = [root]
        else:
            sources = list(args.data_dir)
        con = Engine(sources).readable_connect()
        stack.callback(con.close)
        jobs = tuple(getattr(args, "job", None) or ())
        _check_jobs(con, jobs, sources)
        yield con, _scope(con, args, jobs)


def _import(files: list[str], root: str) -> None:
    """Each file as a job of its own, named as ``summary FILE`` names it."""
    from tfprof.collector.store import Store
    from tfprof.collector.store.file_streams import unused_name
    from tfprof.collector.store.importer import import_files, job_name

    store = Store(root)
    taken: dict[str, object] = {}
    for path in files:
        job = unused_name(job_name(path), taken)
        taken[job] = path
        import_files(store, [path], job)


def _check_jobs(con: duckdb.DuckDBPyConnection, jobs: tuple[str, ...], sources: list[str]) -> None:
    stored = {row[0] for row in con.execute("SELECT DISTINCT job FROM streams").fetchall()}
    if not stored:
        raise NotFound(f"no jobs stored in {', '.join(sources)}")
    unknown = [j for j in jobs if j not in stored]
    if unknown:
        raise NotFound(f"no job {', '.join(unknown)}; jobs are {', '.join(sorted(stored))}")


def _scope(
    con: duckdb.DuckDBPyConnection, args: argparse.Namespace, jobs: tuple[str, ...]
) -> Scope:
    from tfprof.collector.timespec import parse_time

    since, until = getattr(args, "since", None), getattr(args, "until", None)
    if not (since or until):
        return Scope(jobs)
    first_sql = " UNION ALL ".join(
        f"SELECT min(start_ns) AS t FROM {t} WHERE {Scope(jobs).where()}"
        for t in ("kernels", "copies", "memsets", "api_calls")
    )
    row = con.execute(f"SELECT min(t) FROM ({first_sql})").fetchone()
    first = int(row[0]) if row and row[0] is not None else None
    return Scope(
        jobs,
        parse_time(since, first, "--since") if since else None,
        parse_time(until, first, "--until") if until else None,
    )
