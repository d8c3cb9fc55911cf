"""``tfprof-collector jobs``: list stored job runs with state, counts and time ranges.

STATE is ``streaming`` while a live collector holds one of the run's streams open (an
flock it keeps on the stream's log, released by the kernel if the collector dies),
``finished`` once every stream said goodbye, else ``incomplete`` (an agent died, or is
reconnecting / will replay its spool): ``store.catalog.run_state``, as the ``runs`` SQL
view says it. RECORDS counts every record of the run, GPU RECORDS its kernels, copies,
memsets and syncs (as ``summary --view jobs`` names them). CAPTURED is the time its
streams were traced in: the union of their capture windows (a stream traced throughout
spans its first record to its last). Counts come from per-stream
summaries, so listing does not parse every batch. Under the table, each incomplete run
says why, and each run with unreadable parts (damaged log entries, torn files) says what
was skipped, where, and how many records that cost.

Several ``--data-dir`` (data dirs, lake directories, lake URLs) are listed as one
through the SQL engine (the ``runs`` view): a run that several collectors stored shows
once, with every collector that holds a part of it.
"""

from __future__ import annotations

import argparse
import sys
import time
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tfprof.collector.lake.damaged import DamagedFile
    from tfprof.collector.lake.fs import Lake
    from tfprof.collector.store.catalog import JobInfo


def _ts(ns: int | None) -> str:
    if ns is None:
        return "-"
    ms = ns % 10**9 // 10**6
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ns / 1e9)) + f".{ms:03d}"


def _seconds(ns: int | Decimal) -> str:
    """Captured time: the union of the run's capture windows."""
    return f"{int(ns) / 1e9:,.3f} s"


def _tasks(tasks: list[str]) -> str:
    shown = ",".join(tasks[:8])
    return shown + (f",+{len(tasks) - 8}" if len(tasks) > 8 else "")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "jobs",
        help="list stored job runs: state, hosts, tasks, record counts, time ranges",
        description="List the job runs stored in a data dir: state (streaming, finished, "
        "incomplete), streams, tasks, records, dropped records, first and last record, hosts.",
    )
    p.add_argument(
        "--data-dir",
        dest="data_dirs",
        action="append",
        required=True,
        metavar="DIR",
        help="collector data dir to list (never created); also a lake directory or URL "
        "(file://, s3://, gs://); repeat to list several as one",
    )
    p.add_argument(
        "--verify",
        action="store_true",
        help="read every page of every lake file (checksums verified) to find damage; "
        "without it, jobs checks what is cheap: each file's size against the lake's "
        "bookkeeping and its footer (a flipped byte inside a page is then found by the "
        "first command that reads it: summary, advise, export, sql)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import logging

    # Each damaged file is said under the table (a note of its run), not twice.
    logging.getLogger("tfprof.collector.lake.damaged").setLevel(logging.ERROR)
    from tfprof.collector.lake.fs import is_url
    from tfprof.collector.lake.location import is_data_dir
    from tfprof.collector.store import Store
    from tfprof.collector.terminal import TextWriter

    single = args.data_dirs[0] if len(args.data_dirs) == 1 else None
    # One data dir (or a typo): its logs, with streaming state and damage notes.
    if (
        single is None
        or is_url(single)
        or (Path(single).is_dir() and not is_data_dir(Path(single)))
    ):
        return _run_on_lakes(args.data_dirs, args.verify)
    from tfprof.collector.lake.location import lake_of

    infos = Store(single, create=False).list_jobs()
    _check_lake(_scan(lake_of(Path(single)), args.verify), infos)
    if not infos:
        print(f"no jobs in {single}")
        return 0
    header = ("JOB", "RUN", "STATE", "STREAMS", "TASKS", "RECORDS", "GPU RECORDS", "DROPPED",
              "FIRST", "LAST", "CAPTURED", "HOSTS")  # fmt: skip
    rows = [
        (
            i.name,
            i.run_id,
            i.state,
            str(i.streams),
            _tasks(i.tasks),
            f"{i.records:,}",
            f"{i.gpu_records:,}",
            f"{i.dropped:,}",
            _ts(i.first_ns),
            _ts(i.last_ns),
            _seconds(i.captured_ns),
            ",".join(i.hosts),
        )
        for i in infos
    ]
    TextWriter(sys.stdout).table(header, rows)
    notes = [f"{i.name} {i.run_id}: {line}" for i in infos for line in _notes(i)]
    if notes:
        print()  # under the table, after a blank line
        print("\n".join(notes))
    return 0


def _run_on_lakes(sources: list[str], verify: bool) -> int:
    from tfprof.collector.lake.location import distinct_lakes, resolve
    from tfprof.collector.lake.logstate import run_notes
    from tfprof.collector.lake.query import Engine, run_query
    from tfprof.collector.terminal import TextWriter

    engine = Engine(sources)
    runs = run_query(engine, "SELECT * FROM runs").to_pylist()
    notes = run_notes(run_query(engine, "SELECT * FROM log_state").to_pylist())
    found = list(engine.damaged)
    if verify:
        seen = {d.path for d in found}
        for lake in distinct_lakes([resolve(s) for s in sources]):
            found += [d for d in _scan(lake, verify) if d.path not in seen]
    damaged = _damaged(found)
    for r in runs:  # a run with files no reader can read says so in its state
        if (r["job"], r["run"]) in damaged:
            r["state"] = f"{r['state']}, damaged"
            notes.setdefault((r["job"], r["run"]), []).extend(damaged[(r["job"], r["run"])])
    if not runs:
        print(f"no jobs in {', '.join(sources)}")
        return 0
    header = ("JOB", "RUN", "STATE", "STREAMS", "TASKS", "RECORDS", "GPU RECORDS", "DROPPED",
              "FIRST", "LAST", "CAPTURED", "HOSTS", "COLLECTORS")  # fmt: skip
    rows = [
        (
            r["job"],
            r["run"],
            r["state"],
            str(r["streams"]),
            _tasks(r["tasks"].split(",")),
            f"{r['records']:,}",
            f"{r['gpu_records']:,}",
            f"{r['dropped']:,}",
            _ts(r["first_ns"]),
            _ts(r["last_ns"]),
            _seconds(r["captured_ns"]),
            r["hosts"],
            r["collectors"],
        )
        for r in runs
    ]
    TextWriter(sys.stdout).table(header, rows)
    lines = [
        f"{r['job']} {r['run']}: {n}" for r in runs for n in notes.get((r["job"], r["run"]), ())
    ]
    if lines:
        print()  # under the table, after a blank line, as for one data dir
        print("\n".join(lines))
    for what in engine.skipped:
        print(f"tfprof-collector: warning: left out {what}", file=sys.stderr)
    return 0


def _damaged(found: Sequence[DamagedFile]) -> dict[tuple[str, str], list[str]]:
    """Per run (job, run), a note per file of its that cannot be read."""
    out: dict[tuple[str, str], list[str]] = {}
    for d in found:
        out.setdefault((d.job, d.run), []).append(d.line())
    return out


def _scan(lake: Lake, verify: bool) -> list[DamagedFile]:
    """The lake's files that cannot be read: by their size against the lake's
    bookkeeping and their footer (cheap), and with ``verify`` by reading every page."""
    from tfprof.collector.lake.damaged import bookkeeping, damaged_file, footer_check, probe
    from tfprof.collector.lake.fs import list_parquet
    from tfprof.collector.lake.schema import TABLES

    found = []
    for table in TABLES:
        files = [i.path for i in list_parquet(lake, table)]
        held = bookkeeping(lake, files)
        for path in files:
            reason = footer_check(lake, path, held.get(path, (0, None))[1])
            if reason is None and verify:
                reason = probe(lake, path)
            if reason is not None:
                found.append(damaged_file(lake, path, reason))
    return found


def _check_lake(found: Sequence[DamagedFile], infos: Sequence[JobInfo]) -> None:
    """Each run with files in ``found`` says so: its state gets ``damaged``, and a note
    names each file."""
    for info in infos:
        mine = [d for d in found if (d.job, d.run) == (info.name, info.run_id)]
        if mine:
            info.state = f"{info.state}, damaged"
            info.skipped += [d.line().removeprefix("skipped ") for d in mine]
            for d in mine:
                unknown = d.rows is None or info.lost_records is None
                info.lost_records = None if unknown else (info.lost_records or 0) + (d.rows or 0)


def _notes(info: JobInfo) -> list[str]:
    """Why a run is incomplete, and what of it could not be read."""
    from tfprof.collector.store.catalog import ended_note

    notes = [f"incomplete: {info.reason}"] if info.reason else []
    notes += [n for n in (ended_note(info),) if n]
    notes += [f"skipped {what}" for what in info.skipped]
    if info.skipped:
        lost = "unknown" if info.lost_records is None else f"{info.lost_records:,}"
        notes.append(f"records lost in skipped parts: {lost}")
    return notes
