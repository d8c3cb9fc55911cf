"""``tfprof-collector capture``: open one capture window on every matching live stream.

The collector sends the window down each stream that matches (``--job``, ``--host``, or
``--all``); every process starts recording at the same instant on the collector's clock
and stops after ``--duration``. With ``--steps N`` each process records N whole steps
instead: it opens at its next step boundary (``--skip-steps K`` more) and closes N
boundaries later, so every rank records the same step numbers; ``--duration`` then
bounds how long that may take. With ``-o`` the command waits until the window has ended
(plus ``--flush-grace`` for the last records to arrive), then writes one merged timeline
of every matching rank, restricted to the window: the collector writes it and streams it
here (the Export call, as ``export --collector --capture ID``), or, with ``--data-dir``,
this machine reads the collector's data dir itself.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

from tfprof.collector.config import DEFAULT_COLLECTOR
from tfprof.collector.service.remote_options import add_client_options

if TYPE_CHECKING:
    from tfprof.proto import collector_pb2 as pb

RPC_TIMEOUT_S = 10.0
STEPS_DURATION = "10m"  # how long a capture by steps may take, unless --duration says


def local_time(ns: int) -> str:
    """A collector time (ns since the epoch) as this machine's local time, to the ms."""
    ms = ns % 10**9 // 10**6
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ns / 1e9)) + f".{ms:03d}"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "capture",
        help="record every matching rank for a window (jobs traced on demand)",
        description="Open a capture window on every live stream that matches: each traced "
        "process records GPU activity from the same instant on the collector's clock for "
        "--duration. Prints the capture id and the matched streams; with -o, waits for the "
        "window to end and writes one merged timeline of it.",
    )
    add_client_options(p)
    p.add_argument("--job", action="append", metavar="NAME", help="capture this job (repeatable)")
    p.add_argument(
        "--host", action="append", metavar="HOST", help="capture streams of this host (repeatable)"
    )
    p.add_argument("--all", action="store_true", help="capture every live stream")
    p.add_argument(
        "--duration",
        metavar="D",
        help="length of the window, with a unit: 2s, 500ms, 1m (required without --steps; "
        f"with it, the longest the steps may take: default {STEPS_DURATION})",
    )
    p.add_argument(
        "--steps",
        type=int,
        metavar="N",
        help="record N whole steps of every matching process instead of a time: each opens "
        "at its next step boundary and closes N boundaries later (steps: the zero-code "
        "step markers of PyTorch and Keras jobs, a replay's ProfilerStep ranges)",
    )
    p.add_argument(
        "--skip-steps",
        type=int,
        default=0,
        metavar="K",
        help="with --steps, let K more step boundaries pass before opening (default: 0)",
    )
    p.add_argument(
        "--start-in",
        default="1s",
        metavar="S",
        help="open the window this long after the request, so every host has it in time",
    )
    p.add_argument(
        "-o",
        "--output",
        metavar="PATH",
        default=None,
        help="wait, then write the window's merged timeline here, sent by the collector "
        "(or read from --data-dir); its suffix picks the format as for export (default: "
        "no file)",
    )
    p.add_argument(
        "--data-dir",
        metavar="DIR",
        default=None,
        help="with -o, read the collector's data dir on this machine instead of asking the "
        "collector for the trace (default: ask the collector); with --steps, -o stops "
        "waiting as soon as the data dir holds every process's steps",
    )
    p.add_argument(
        "--flush-grace",
        default="5s",
        metavar="D",
        help="with -o, how long after the window to wait for its last records",
    )
    p.add_argument(
        "--format",
        choices=("chrome", "perfetto", "xplane", "stepstats"),
        default=None,
        help="output format (default: from the output's suffix)",
    )
    p.add_argument(
        "--group-by",
        choices=("job", "gpu"),
        default="job",
        help="job: tracks per job/task/GPU/stream; gpu: every job under its physical GPU",
    )
    p.set_defaults(func=run)


def _positive_duration(text: str, flag: str, allow_zero: bool = False) -> int:
    from tfprof.collector.errors import InvalidArgument
    from tfprof.collector.timespec import parse_duration

    value = 0 if text.strip() == "0" else parse_duration(text, flag)
    if value < 0 or (value == 0 and not allow_zero):
        raise InvalidArgument(f"{flag} {text!r}: must be {'0 or more' if allow_zero else '> 0'}")
    return value


def request_from(args: argparse.Namespace) -> pb.CaptureRequest:
    from tfprof.collector.errors import InvalidArgument
    from tfprof.proto import collector_pb2 as pb

    if args.all and (args.job or args.host):
        raise InvalidArgument("--all captures every stream: give it without --job or --host")
    if not (args.all or args.job or args.host):
        raise InvalidArgument("say what to capture: --job NAME, --host HOST, or --all")
    steps, skip = args.steps, args.skip_steps
    if steps is not None and steps < 1:
        raise InvalidArgument(f"--steps {steps}: must be 1 or more")
    if skip < 0 or (skip and steps is None):
        raise InvalidArgument("--skip-steps K: K >= 0, with --steps N")
    duration = args.duration or (STEPS_DURATION if steps else None)
    if duration is None:
        raise InvalidArgument("say how long to capture: --duration D, or --steps N")
    return pb.CaptureRequest(
        jobs=args.job or [],
        hosts=args.host or [],
        all=args.all,
        duration_ns=_positive_duration(duration, "--duration"),
        start_in_ns=_positive_duration(args.start_in, "--start-in", allow_zero=True),
        steps=steps or 0,
        skip_steps=skip,
    )


def run(args: argparse.Namespace) -> int:
    import grpc

    from tfprof.collector.export import format_for
    from tfprof.collector.service.remote import open_remote

    request = request_from(args)
    grace_ns = _positive_duration(args.flush_grace, "--flush-grace", allow_zero=True)
    if args.output:
        format_for(args.output, args.format)  # a bad name fails before the capture
    with open_remote(args) as remote:
        try:
            reply = remote.stub.StartCapture(
                request, metadata=remote.metadata, timeout=RPC_TIMEOUT_S
            )
        except grpc.RpcError as exc:
            raise remote.error(exc, "capture") from None
    capture = reply.capture
    print_capture(capture)
    if args.output and request.steps and args.data_dir:
        from tfprof.collector.commands.capture_steps import wait_for_steps

        wait_for_steps(capture, args.data_dir, grace_ns)
        write_window(capture, args)
    elif args.output:
        # Wait by our own clock for as long as the window lasts from now: the collector's
        # clock may differ from ours.
        wait_s = (request.start_in_ns + request.duration_ns + grace_ns) / 1e9
        print(f"tfprof-collector: waiting {wait_s:.1f} s for the window to end", file=sys.stderr)
        time.sleep(wait_s)
        write_window(capture, args)
    return 0


def print_capture(capture: pb.Capture) -> None:
    from tfprof.collector.terminal import TextWriter

    request = capture.request
    if request.steps:
        skip = f", skipping {request.skip_steps}," if request.skip_steps else ""
        length = (f"{request.steps} step(s){skip} each, within "
                  f"{capture.duration_ns / 1e9:g} s")  # fmt: skip
    else:
        length = f"for {capture.duration_ns / 1e9:g} s"
    print(
        f"capture {capture.capture_id}: {len(capture.streams)} stream(s), from "
        f"{local_time(capture.start_ns)} {length}"
    )
    rows = [(s.job, s.host, str(s.pid), s.task, s.run_id) for s in capture.streams]
    TextWriter(sys.stdout).table(("JOB", "HOST", "PID", "TASK", "RUN"), rows)


def write_window(capture: pb.Capture, args: argparse.Namespace) -> int:
    """Every matching rank's records inside the window (a capture by steps: inside its
    longest duration, which holds every process's steps), merged into ``args.output``:
    read from ``args.data_dir``, else written by the collector and streamed here."""
    from tfprof.collector.commands import export

    options = argparse.Namespace(
        inputs=[],
        as_=None,
        shift=None,
        data_dir=[args.data_dir] if args.data_dir else None,
        job=None,
        capture=capture.capture_id,
        collector=None if args.data_dir else (args.collector or DEFAULT_COLLECTOR),
        auth_token_file=args.auth_token_file,
        tls_ca=args.tls_ca,
        output=args.output,
        format=args.format,
        group_by=args.group_by,
        window=None,
        since=None,
        until=None,
    )
    return export.run(options)
