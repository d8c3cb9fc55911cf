"""``tfprof-collector jobs``: list stored job runs with state, counts and time ranges.

STATE is ``streaming`` while a live collector holds one of the run's streams open (an
flock it keeps on the stream's log, released by the kernel if the collector dies),
``finished`` once every stream said goodbye, else ``incomplete`` (an agent died, or is
reconnecting / will replay its spool). Counts come from per-stream summaries, so listing
does not parse every batch.
"""

from __future__ import annotations

import argparse
import sys
import time


def _ts(ns: int | None) -> str:
    if ns is None:
        return "-"
    ms = ns % 10**9 // 10**6
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ns / 1e9)) + f".{ms:03d}"


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
        required=True,
        metavar="DIR",
        help="collector data dir to list (never created)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tfprof.collector.store import Store
    from tfprof.collector.terminal import TextWriter

    infos = Store(args.data_dir, create=False).list_jobs()
    if not infos:
        print(f"no jobs in {args.data_dir}")
        return 0
    header = ("JOB", "RUN", "STATE", "STREAMS", "TASKS", "RECORDS", "DROPPED", "FIRST", "LAST",
              "HOSTS")  # fmt: skip
    rows = [
        (
            i.name,
            i.run_id,
            i.state,
            str(i.streams),
            _tasks(i.tasks),
            f"{i.records:,}",
            f"{i.dropped:,}",
            _ts(i.first_ns),
            _ts(i.last_ns),
            ",".join(i.hosts),
        )
        for i in infos
    ]
    TextWriter(sys.stdout).table(header, rows)
    return 0
