"""``tfprof-collector``: serve, list and export collected GPU timelines."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from collections.abc import Sequence

from tfprof.agent import __version__
from tfprof.collector.errors import CollectorError, InvalidArgument, NotFound


def _ts(ns: int | None) -> str:
    if ns is None:
        return "-"
    return (
        time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ns / 1e9)) + f".{ns % 10**9 // 10**6:03d}"
    )


def cmd_serve(args: argparse.Namespace) -> int:
    from tfprof.collector.server import CollectorServer

    server = CollectorServer(args.listen, args.data_dir, max_workers=args.max_workers).start()
    print(f"listening on {server.address}", flush=True)
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    while not stop.wait(1.0):
        pass
    server.stop(grace=args.grace)
    return 0


def cmd_jobs(args: argparse.Namespace) -> int:
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


def cmd_export(args: argparse.Namespace) -> int:
    from tfprof.collector.export import write_timeline
    from tfprof.collector.merge import build_timeline
    from tfprof.collector.store import Store

    jobs = Store(args.data_dir).load_jobs(args.job or None)
    if not jobs:
        raise NotFound(f"no jobs stored in {args.data_dir}")
    timeline = build_timeline(jobs, group_by=args.group_by)
    write_timeline(timeline, args.output, args.format)
    records = sum(j.num_records for j in jobs)
    print(f"wrote {args.output}: {len(jobs)} job run(s), {records:,} records", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tfprof-collector",
        description="Collect GPU activity streamed by tfprof agents; merge and export it.",
    )
    parser.add_argument("--version", action="version", version=f"tfprof-collector {__version__}")
    parser.add_argument("--log-level", default="INFO", help="log level (default: INFO)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    serve = sub.add_parser("serve", help="run the collector daemon")
    serve.add_argument(
        "--listen",
        default="127.0.0.1:4317",
        metavar="HOST:PORT",
        help="address to listen on; port 0 picks one and prints it (default: 127.0.0.1:4317)",
    )
    serve.add_argument("--data-dir", required=True, metavar="DIR", help="where records are stored")
    serve.add_argument(
        "--max-workers",
        type=int,
        default=256,
        metavar="N",
        help="concurrent streams served (default: 256)",
    )
    serve.add_argument(
        "--grace",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="on SIGTERM, how long running streams may take to finish",
    )
    serve.set_defaults(func=cmd_serve)

    jobs = sub.add_parser("jobs", help="list stored jobs with record counts and time ranges")
    jobs.add_argument("--data-dir", required=True, metavar="DIR")
    jobs.set_defaults(func=cmd_jobs)

    export = sub.add_parser("export", help="merge jobs into one timeline file")
    export.add_argument("--data-dir", required=True, metavar="DIR")
    export.add_argument(
        "--job",
        action="append",
        metavar="NAME",
        help="job to include (repeatable; default: all jobs)",
    )
    export.add_argument(
        "--group-by",
        choices=("job", "gpu"),
        default="job",
        help="job: tracks per job/task/GPU/stream; gpu: every job's streams "
        "under the physical GPU they ran on",
    )
    export.add_argument("--format", default=None, help="output format (default: from the suffix)")
    export.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="FILE",
        help="output file, .json or .json.gz (Chrome trace format)",
    )
    export.set_defaults(func=cmd_export)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logger = logging.getLogger("tfprof")
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
    logger.setLevel(getattr(logging, str(args.log_level).upper(), logging.INFO))
    try:
        return int(args.func(args))
    except NotFound as exc:
        print(f"tfprof-collector: {exc}", file=sys.stderr)
        return 1
    except (InvalidArgument, ValueError) as exc:
        print(f"tfprof-collector: {exc}", file=sys.stderr)
        return 2
    except CollectorError as exc:
        print(f"tfprof-collector: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"tfprof-collector: {exc}", file=sys.stderr)
        return 1


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
