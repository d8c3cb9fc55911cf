"""``tfprof-collector export``: the one command that writes a merged timeline.

Its inputs, in any mix: trace files (``IN ...``, whatever ``import`` reads) and stored
jobs (``--data-dir``, ``--job``). Or, instead of both, a running collector
(``--collector``): it writes the timeline of its own data dir in the requested format
and streams the bytes (the Export call), so a laptop gets a trace of a cluster's
collector without sharing its disk. ``--capture ID`` keeps what one capture window
recorded. ``merge`` is this command for trace files, kept as an alias for scripts.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from tfprof.collector.errors import InvalidArgument, PathError

if TYPE_CHECKING:
    from tfprof.collector.export.chrome_stacks import ChromeStacks
    from tfprof.collector.export.output import BinaryOutput
    from tfprof.collector.jobdata import JobData

FORMATS = ("chrome", "perfetto", "xplane", "stepstats", "speedscope", "collapsed")
FORMAT_HELP = (
    "chrome (.json, .json.gz; the default), perfetto (.pftrace; best for large traces), "
    "xplane (a TensorBoard log dir, or NAME.xplane.pb), stepstats (.pb, .pbtxt: a "
    "TensorFlow RunMetadata); flame graphs of GPU time by Python stack: speedscope "
    "(.speedscope.json), collapsed (.collapsed, .folded: flamegraph.pl, inferno); "
    "default: from the output's suffix"
)
DESCRIPTION = """\
Merge trace files and/or stored jobs into one timeline: Chrome JSON, Perfetto, XPlane
(TensorBoard/XProf) or TensorFlow StepStats, chosen by the output's suffix or --format.

Inputs, in any mix: trace files (IN: our exports, Kineto and TF timelines, .pftrace,
StepStats; successive steps of one job, or with --as jobs a job each) and the jobs
stored in one or more --data-dir (--job picks some). With --collector, a running collector reads
its own data dir and streams the trace to this machine (give --job, --capture, the time
options and the output options; no IN or --data-dir then). --capture ID keeps what one
capture window recorded: its streams, inside its window.

`merge` is this command for trace files, kept for scripts. Stored records are read a
time chunk at a time: memory holds what overlaps in time, not a process.

--format speedscope or collapsed writes flame graphs of GPU time by the Python stack that
launched it instead of a timeline (one speedscope profile per job and rank, GPU and
sampled host time): docs/guides/code-view.md."""


def add_output_options(p: argparse.ArgumentParser) -> None:
    """Options every timeline-writing command shares (export, merge)."""
    from tfprof.collector.timespec import TIME_HELP, WINDOW_HELP

    p.add_argument(
        "--group-by",
        choices=("job", "gpu"),
        default="job",
        help="job: tracks per job/task/GPU/stream; gpu: every job's streams under the "
        "physical GPU they ran on (default: job)",
    )
    p.add_argument("--format", choices=FORMATS, default=None, help=FORMAT_HELP)
    p.add_argument("--window", metavar="START:END", default=None, help=WINDOW_HELP)
    p.add_argument("--since", metavar="TIME", help=f"keep from this time on: {TIME_HELP}")
    p.add_argument("--until", metavar="TIME", help=f"keep up to this time: {TIME_HELP}")
    p.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="PATH",
        help="output file (or log dir for xplane); its suffix picks the format",
    )


def add_file_options(p: argparse.ArgumentParser, required: bool) -> None:
    """Trace files as input (export, merge) and how they are laid side by side."""
    from tfprof.collector.commands.import_ import SHIFT_HELP

    p.add_argument(
        "inputs",
        nargs="+" if required else "*",
        metavar="IN",
        help="trace files to merge, in order" + ("" if required else " (default: none)"),
    )
    p.add_argument(
        "--as",
        dest="as_",
        choices=("steps", "jobs"),
        default="steps" if required else None,
        help="steps (default): one job, files consecutive on shared tracks; jobs: one job "
        "per file (as recorded; other formats named after the file), in parallel",
    )
    p.add_argument("--shift", default="auto" if required else None, metavar="MODE", help=SHIFT_HELP)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from tfprof.collector.service.remote_options import add_client_options

    p = sub.add_parser(
        "export",
        help="merge trace files and/or stored jobs into one timeline file",
        description=DESCRIPTION,
    )
    add_file_options(p, required=False)
    p.add_argument(
        "--data-dir",
        action="append",
        metavar="DIR",
        help="collector data dir to read (never created); also a lake directory or URL "
        "(file://, s3://, gs://); repeat to merge several into one timeline (default: none)",
    )
    p.add_argument(
        "--job", action="append", metavar="NAME", help="stored job to include (repeatable; "
        "default: all)"
    )  # fmt: skip
    p.add_argument(
        "--capture",
        metavar="ID",
        default=None,
        help="only what this capture recorded: its streams, inside its window (ids: "
        "`tfprof-collector captures`) (default: everything)",
    )
    add_client_options(
        p,
        collector_help="ask this running collector for the trace instead of reading files "
        "(its data dir need not be reachable from here) (default: read locally)",
    )
    add_output_options(p)
    p.set_defaults(func=run)


def write(jobs: list[JobData], args: argparse.Namespace) -> int:
    """Merge ``jobs`` (lake streams) with the shared options and write the output, a
    time chunk at a time; returns the slices written."""
    from tfprof.collector.export import format_for, write_timeline
    from tfprof.collector.export.selection import time_window
    from tfprof.collector.merged.streamed import streamed
    from tfprof.collector.terminal import progress

    format_for(args.output, args.format)  # a bad name fails before any work
    window = time_window(
        jobs, args.window, getattr(args, "since", None), getattr(args, "until", None)
    )
    with progress("placing the tracks"):
        timeline = streamed(jobs, args.group_by, window)
    try:
        with (
            progress(f"merging and writing {args.output}", unit="bytes") as advance,
            stacks_after(args, window, timeline.origin_ns) as (after, chrome),
        ):
            target = write_timeline(timeline, args.output, args.format, advance, after, chrome)
    except OSError as exc:  # the output the user named cannot be created or written
        raise PathError.from_os("output", args.output, exc) from exc
    print(f"tfprof-collector: wrote {target}: {timeline.num_slices:,} slices", file=sys.stderr)
    return timeline.num_slices


@contextlib.contextmanager
def stacks_after(
    args: argparse.Namespace, window: tuple[int | None, int | None] | None, origin_ns: int
) -> Iterator[tuple[Callable[[BinaryOutput], None] | None, ChromeStacks | None]]:
    """The inputs' Python stack samples for the output: for Perfetto, what appends them
    (export/perfetto_stacks.py), for Chrome JSON, what the reporter adds
    (export/chrome_stacks.py); (None, None) for other formats. Only Kineto-like JSON
    files and stored jobs can hold stacks: other trace files are not read again."""
    from tfprof.collector.export import format_for

    files = [f for f in (getattr(args, "inputs", None) or []) if ".json" in f.lower()]
    data_dirs = getattr(args, "data_dir", None)
    fmt = format_for(args.output, args.format)
    if fmt not in ("perfetto", "chrome") or not (files or data_dirs):
        yield None, None
        return
    from tfprof.collector.analysis.code_sql import Scope
    from tfprof.collector.commands._code_input import code_connection
    from tfprof.collector.export.chrome_stacks import ChromeStacks
    from tfprof.collector.export.perfetto_stacks import stack_packets

    source = argparse.Namespace(
        files=files if not data_dirs else [], data_dir=data_dirs, job=getattr(args, "job", None),
        since=None, until=None,
    )  # fmt: skip
    with code_connection(source) as (con, scope):
        since, until = window or (None, None)
        scope = Scope(scope.jobs, since, until)

        def append(out: BinaryOutput) -> None:
            for trace in stack_packets(con, scope, origin_ns):
                out.write(trace.SerializeToString())

        if fmt == "perfetto":
            yield append, None
        else:
            yield None, ChromeStacks(con, scope, origin_ns)


def check_args(args: argparse.Namespace) -> None:
    """What cannot go together, said before anything is read."""
    files, data_dirs = args.inputs or [], args.data_dir or []
    if args.capture and (args.window or args.since or args.until):
        raise InvalidArgument("--capture keeps its own window: give no --window/--since/--until")
    if args.collector:
        if files or data_dirs:
            raise InvalidArgument(
                "--collector exports what that collector stores: give no IN file or --data-dir"
            )
        return
    if not (files or data_dirs):
        raise InvalidArgument(
            "nothing to export: give trace files (IN), --data-dir DIR, or --collector HOST:PORT"
        )
    if not files and (args.as_ or args.shift):
        raise InvalidArgument("--as and --shift place trace files (IN): give some")
    if args.capture and not data_dirs:
        raise InvalidArgument("--capture needs the --data-dir (or --collector) that recorded it")


def run(args: argparse.Namespace) -> int:
    check_args(args)
    from tfprof.collector.export.flame import flame_format
    from tfprof.collector.export.selection import stored_jobs

    flame = flame_format(args.output, args.format)
    if flame is not None:
        return write_flame(args, flame)
    if args.collector:
        return run_remote(args)
    from tfprof.collector.read.trace_files import lake_jobs
    from tfprof.collector.store.importer import jobs_from_files
    from tfprof.collector.terminal import progress

    jobs: list[JobData] = []
    if args.inputs:
        with progress(f"reading {len(args.inputs)} file(s)"):
            steps = (args.as_ or "steps") == "steps"
            # Read as stored jobs are read: each file a lake held in memory.
            jobs += lake_jobs(jobs_from_files(args.inputs, steps, args.shift or "auto"))
    if args.data_dir:
        stored, window = stored_jobs(args.data_dir, args.job, args.capture)
        jobs += stored
        if window:
            args.window = window
    write(jobs, args)
    return 0


def run_remote(args: argparse.Namespace) -> int:
    from tfprof.collector.export import format_for
    from tfprof.collector.service.remote import download_export, open_remote
    from tfprof.proto import collector_pb2 as pb

    fmt = format_for(args.output, args.format)  # a bad name fails before the call
    request = pb.ExportRequest(
        jobs=args.job or [],
        capture_id=args.capture or "",
        format=fmt,
        file_name=os.path.basename(args.output.rstrip("/" + os.sep)),
        group_by=args.group_by,
        window=args.window or "",
        since=args.since or "",
        until=args.until or "",
    )
    with open_remote(args) as remote:
        target, slices = download_export(remote, request, args.output)
    print(f"tfprof-collector: wrote {target}: {slices:,} slices", file=sys.stderr)
    return 0


def write_flame(args: argparse.Namespace, fmt: str) -> int:
    """A flame graph (export/flame.py) of the IN files or the stored jobs."""
    from tfprof.collector.analysis.code_read import read
    from tfprof.collector.commands._analysis_input import output
    from tfprof.collector.commands._code_input import code_connection
    from tfprof.collector.export.flame import write_collapsed, write_speedscope
    from tfprof.collector.terminal import progress

    for given, flag in ((args.collector, "--collector"), (args.capture, "--capture"),
                        (args.window, "--window"), (args.as_, "--as")):  # fmt: skip
        if given:
            raise InvalidArgument(f"{flag} does not apply to --format {fmt}")
    if args.inputs and args.data_dir:
        raise InvalidArgument(f"--format {fmt}: give trace files (IN) or --data-dir, not both")
    source = argparse.Namespace(
        files=args.inputs, data_dir=args.data_dir, job=args.job, since=args.since,
        until=args.until,
    )  # fmt: skip
    with progress("reading stacks"), code_connection(source) as (con, scope):
        att = read(con, scope)
    with output(args.output) as out:
        if fmt == "speedscope":
            n = write_speedscope(att, out)
            what = f"{n} profile(s)"
        else:
            n = write_collapsed(att, out)
            what = f"{n:,} stack(s)"
    print(f"tfprof-collector: wrote {args.output}: {what}", file=sys.stderr)
    return 0
