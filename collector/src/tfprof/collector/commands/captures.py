"""``tfprof-collector captures``: list the capture windows a collector has recorded.

From a running collector (``--collector``, the default) or straight from its data dir
(``--data-dir``: its ``captures.jsonl``, readable while the collector is down).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from tfprof.collector.commands.capture import local_time
from tfprof.collector.service.remote_options import add_client_options

if TYPE_CHECKING:
    from tfprof.proto import collector_pb2 as pb


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:

    p = sub.add_parser(
        "captures",
        help="list recorded capture windows",
        description="List the captures a collector recorded: id, when requested, the "
        "window on the collector's clock, what was asked for and the streams it reached.",
    )
    add_client_options(p)
    p.add_argument(
        "--data-dir",
        metavar="DIR",
        default=None,
        help="read the collector's data dir instead of asking it (default: ask --collector)",
    )
    p.add_argument("--format", choices=("table", "json"), default="table", help="output format")
    p.set_defaults(func=run)


def read_captures(args: argparse.Namespace) -> list[pb.Capture]:
    import grpc

    from tfprof.collector.errors import InvalidArgument
    from tfprof.collector.service.remote import open_remote
    from tfprof.collector.store import Store
    from tfprof.collector.store.capture_log import CaptureLog
    from tfprof.proto import collector_pb2 as pb

    if args.data_dir:
        if args.collector:
            raise InvalidArgument("give --collector or --data-dir, not both")
        Store(args.data_dir, create=False)  # NotFound for a data dir that does not exist
        return CaptureLog(args.data_dir).read()
    with open_remote(args) as remote:
        try:
            reply = remote.stub.ListCaptures(
                pb.ListCapturesRequest(), metadata=remote.metadata, timeout=10.0
            )
        except grpc.RpcError as exc:
            raise remote.error(exc, "captures") from None
    return list(reply.captures)


def window_length(capture: pb.Capture) -> str:
    """``2 s``, or for a capture by steps ``4 steps (skip 1, <= 600 s)``."""
    seconds = f"{capture.duration_ns / 1e9:g} s"
    request = capture.request
    if not request.steps:
        return seconds
    skip = f"skip {request.skip_steps}, " if request.skip_steps else ""
    return f"{request.steps} steps ({skip}<= {seconds})"


def run(args: argparse.Namespace) -> int:
    from tfprof.collector.service.capture_windows import describe_targets
    from tfprof.collector.store.capture_log import to_json
    from tfprof.collector.terminal import TextWriter

    captures = read_captures(args)
    if args.format == "json":
        json.dump([to_json(c) for c in captures], sys.stdout, indent=2)
        print()
        return 0
    if not captures:
        print("no captures")
        return 0
    header = ("ID", "REQUESTED", "START", "DURATION", "STREAMS", "OF")
    rows = [
        (
            c.capture_id,
            local_time(c.requested_ns),
            local_time(c.start_ns),
            window_length(c),
            str(len(c.streams)),
            describe_targets(c.request),
        )
        for c in captures
    ]
    TextWriter(sys.stdout).table(header, rows)
    return 0
