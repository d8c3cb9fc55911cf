"""``tfprof-collector top``: which job uses which GPU now, live or as one snapshot.

top reads the collector's Prometheus endpoint (``serve --metrics-listen``): one source
of truth with Grafana and no RPC of its own. Rates are the increase of the counters
between two scrapes ``--interval`` apart.
"""

from __future__ import annotations

import argparse
import sys
import time

from tfprof.collector.errors import InvalidArgument

DEFAULT_COLLECTOR = "127.0.0.1:9317"  # deploy/'s metrics port
MAX_INTERVAL_S = 3600.0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from tfprof.collector.top.snapshot import NOTE, SORT_KEYS

    p = sub.add_parser(
        "top",
        help="live view: GPU busy %% per physical GPU and the jobs sharing it",
        description=(
            "A terminal view refreshed every --interval: per physical GPU (host, UUID) its\n"
            "busy % and the jobs sharing it with their shares; per job its processes, busy %,\n"
            "kernels/s, copy GB/s and dropped records. Keys: s sorts, / filters, q or Ctrl-C\n"
            "quits.\n\n"
            "top reads the Prometheus endpoint a collector serves with\n"
            "`serve --metrics-listen HOST:PORT` (what Grafana reads; no RPC of its own), so\n"
            "--collector takes that metrics address. Rates come from two scrapes --interval\n"
            "apart; busy % counts each CUDA stream's kernel time, so it may pass 100.\n\n"
            f"Note: {NOTE}."
        ),
    )
    p.add_argument(
        "--collector",
        default=DEFAULT_COLLECTOR,
        metavar="HOST:PORT",
        help="the collector's metrics address (serve --metrics-listen), or an http:// URL",
    )
    p.add_argument(
        "--once",
        action="store_true",
        help="print one snapshot (rates over one --interval) and exit, for scripts",
    )
    p.add_argument(
        "--format",
        choices=("table", "json"),
        default="table",
        help="output of --once",
    )
    p.add_argument(
        "--sort",
        choices=SORT_KEYS,
        default="busy",
        help="order of the job table, highest first (name: alphabetical); GPUs by busy %%",
    )
    p.add_argument(
        "--filter",
        default="",
        metavar="TEXT",
        help="show only jobs, hosts and GPUs whose name contains TEXT (any case; "
        "default: everything)",
    )
    p.add_argument(
        "--interval",
        default="1s",
        metavar="DURATION",
        help="time between scrapes, e.g. 1s, 500ms, 2 (seconds)",
    )
    p.set_defaults(func=run)


def parse_interval(text: str) -> float:
    """``--interval`` in seconds: a duration with a unit, or a plain number of seconds."""
    from tfprof.collector.timespec import parse_duration

    try:
        seconds = float(text)
    except ValueError:
        seconds = parse_duration(text, "--interval") / 1e9
    if not 0.05 <= seconds <= MAX_INTERVAL_S:
        raise InvalidArgument(
            f"--interval {text!r}: between 50ms and {MAX_INTERVAL_S:.0f}s, please"
        )
    return seconds


def run(args: argparse.Namespace) -> int:
    from tfprof.collector.top.scrape import metrics_url, read_metrics

    interval = parse_interval(args.interval)
    url = metrics_url(args.collector)
    if args.once:
        return _once(args, url, interval)
    if not sys.stdout.isatty():
        raise InvalidArgument(
            "the live view needs a terminal; use --once (with --format json for scripts)"
        )
    from tfprof.collector.top.app import TopApp

    app = TopApp(
        lambda: read_metrics(url, timeout=max(interval, 5.0)),
        args.collector,
        interval_s=interval,
        sort=args.sort,
        filter_text=args.filter,
    )
    app.run()
    return 0


def _once(args: argparse.Namespace, url: str, interval: float) -> int:
    from tfprof.collector.top.scrape import read_metrics
    from tfprof.collector.top.screen import write_json, write_table
    from tfprof.collector.top.snapshot import between

    first = read_metrics(url)
    time.sleep(max(0.0, interval - (time.monotonic() - first.at)))
    snapshot = between(first, read_metrics(url)).matching(args.filter).sorted_by(args.sort)
    if args.format == "json":
        write_json(snapshot, args.collector, sys.stdout)
    else:
        write_table(snapshot, sys.stdout)
    return 0
