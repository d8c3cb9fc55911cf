"""``tfprof-collector top``: which job uses which GPU now, live or as one snapshot.

top asks the collector for its live figures over gRPC (the LiveFigures call) at the
address every other command and every agent use (``--collector``), so it works wherever
gRPC reaches, with the same token and TLS. ``--metrics-url`` reads the same figures from
the Prometheus endpoint instead (``serve --metrics-listen``), as Grafana does. Rates are
the increase of the counters between two reads ``--interval`` apart.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from tfprof.collector.errors import InvalidArgument

if TYPE_CHECKING:
    from tfprof.collector.top.scrape import Scrape

MAX_INTERVAL_S = 3600.0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from tfprof.collector.service.remote_options import add_client_options
    from tfprof.collector.top.snapshot import NOTE, SORT_KEYS

    p = sub.add_parser(
        "top",
        help="live view: GPU busy %% per physical GPU and the jobs sharing it",
        description=(
            "A terminal view refreshed every --interval: per physical GPU (host, UUID) its\n"
            "busy % and the jobs sharing it with their shares; per job its processes, busy %,\n"
            "kernels/s, copy GB/s and dropped records. Keys: s sorts, / filters, q or Ctrl-C\n"
            "quits.\n\n"
            "--collector is the collector's gRPC address, as for every other command (top\n"
            "asks it for its live figures); --metrics-url reads the same figures from its\n"
            "Prometheus endpoint (`serve --metrics-listen`) instead. Rates come from two\n"
            "reads --interval apart; busy % is GPU busy time as summary and advise count it\n"
            "(the union of kernels, copies and memsets on the GPU), summed over the jobs\n"
            "sharing a GPU.\n\n"
            f"Note: {NOTE}."
        ),
    )
    add_client_options(p)
    p.add_argument(
        "--metrics-url",
        default=None,
        metavar="URL",
        help="read the collector's Prometheus endpoint instead: HOST:PORT of `serve "
        "--metrics-listen`, or an http(s):// URL (default: ask --collector over gRPC)",
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
        help="time between reads, e.g. 1s, 500ms, 2 (seconds)",
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


Reader = Callable[[float], "Scrape"]  # one read, given a timeout in seconds


def open_reader(args: argparse.Namespace, stack: contextlib.ExitStack) -> tuple[Reader, str]:
    """How to read the figures, and what to call their source."""
    from tfprof.collector.service.remote import open_remote
    from tfprof.collector.top.scrape import metrics_url, read_live, read_metrics

    metrics = args.metrics_url
    if metrics is None and args.collector and "://" in args.collector:
        metrics = args.collector  # an http(s) URL: what --collector meant before gRPC
    if metrics is not None:
        if args.collector and metrics is not args.collector:
            raise InvalidArgument("give --collector or --metrics-url, not both")
        url = metrics_url(metrics)
        return (lambda timeout: read_metrics(url, timeout)), url
    remote = stack.enter_context(open_remote(args))
    return (lambda timeout: read_live(remote, timeout)), remote.address


def first_read(read: Reader, where: str, timeout: float) -> Scrape:
    """The first read; a --collector that answers HTTP metrics rather than gRPC is told
    how to say what it meant."""
    from tfprof.collector.top.scrape import MetricsUnavailable, metrics_url, read_metrics

    try:
        return read(timeout)
    except MetricsUnavailable as unreachable:
        if "://" in where:
            raise
        try:
            read_metrics(metrics_url(where), timeout=2.0)
        except (MetricsUnavailable, InvalidArgument):
            raise unreachable from None  # nothing answers there at all
        raise InvalidArgument(
            f"{where} is a Prometheus metrics endpoint, not the collector's gRPC address: "
            f"give --collector HOST:PORT (serve --listen), or --metrics-url {where}"
        ) from None


def run(args: argparse.Namespace) -> int:
    interval = parse_interval(args.interval)
    if not args.once and not sys.stdout.isatty():
        raise InvalidArgument(
            "the live view needs a terminal; use --once (with --format json for scripts)"
        )
    with contextlib.ExitStack() as stack:
        read, where = open_reader(args, stack)
        first = first_read(read, where, max(interval, 5.0))
        if args.once:
            return _once(args, read, where, first, interval)
        from tfprof.collector.top.app import TopApp

        app = TopApp(
            lambda: read(max(interval, 5.0)),
            where,
            interval_s=interval,
            sort=args.sort,
            filter_text=args.filter,
        )
        app.run()
    return 0


def _once(
    args: argparse.Namespace, read: Reader, where: str, first: Scrape, interval: float
) -> int:
    from tfprof.collector.top.screen import write_json, write_table
    from tfprof.collector.top.snapshot import between

    time.sleep(max(0.0, interval - (time.monotonic() - first.at)))
    snapshot = between(first, read(max(interval, 5.0))).matching(args.filter).sorted_by(args.sort)
    if args.format == "json":
        write_json(snapshot, where, sys.stdout)
    else:
        write_table(snapshot, sys.stdout)
    return 0
