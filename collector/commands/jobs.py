"""``tfprof-collector jobs``: list stored jobs with record counts and time ranges."""

from __future__ import annotations

import argparse
import time


def _ts(ns: int | None) -> str:
    if ns is None:
        return "-"
    ms = ns % 10**9 // 10**6
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ns / 1e9)) + f".{ms:03d}"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("jobs", help="list stored jobs with record counts and time ranges")
    p.add_argument("--data-dir", required=True, metavar="DIR")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tfprof.collector.store import Store

    infos = Store(args.data_dir).list_jobs()
    if not infos:
        print(f"no jobs in {args.data_dir}")
        return 0
    header = ("JOB", "RUN", "STATE", "STREAMS", "RECORDS", "DROPPED", "FIRST", "LAST", "HOSTS")
    rows = [
        (
            i.name,
            i.run_id,
            "finished" if i.finished else "incomplete",
            str(i.streams),
            f"{i.records:,}",
            f"{i.dropped:,}",
            _ts(i.first_ns),
            _ts(i.last_ns),
            ",".join(i.hosts),
        )
        for i in infos
    ]
    widths = [max(len(r[c]) for r in [header, *rows]) for c in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0
