"""``tfprof-collector export``: merge stored jobs into one timeline file."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from tfprof.collector.errors import NotFound, PathError

if TYPE_CHECKING:
    from tfprof.collector.jobdata import JobData

FORMAT_HELP = (
    "chrome (.json, .json.gz; the default), perfetto (.pftrace; best for large traces), "
    "xplane (a TensorBoard log dir, or NAME.xplane.pb), stepstats (.pb, .pbtxt: a "
    "TensorFlow RunMetadata); default: from the output's suffix"
)


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
    p.add_argument(
        "--format",
        choices=("chrome", "perfetto", "xplane", "stepstats"),
        default=None,
        help=FORMAT_HELP,
    )
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


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "export",
        help="merge stored jobs into one timeline file",
        description="Merge stored jobs into one timeline: Chrome JSON, Perfetto, "
        "XPlane (TensorBoard/XProf) or TensorFlow StepStats. Stored records are read "
        "one process at a time, so memory stays bounded by the largest process. "
        "Example: tfprof-collector export --data-dir ./tfprof-data -o trace.pftrace",
    )
    p.add_argument(
        "--data-dir",
        required=True,
        action="append",
        metavar="DIR",
        help="collector data dir to read (never created); also a lake directory or URL "
        "(file://, s3://, gs://); repeat to merge several into one timeline",
    )
    p.add_argument(
        "--job", action="append", metavar="NAME", help="job to include (repeatable; default: all)"
    )
    add_output_options(p)
    p.set_defaults(func=run)


def write(jobs: list[JobData], args: argparse.Namespace) -> int:
    """Merge ``jobs`` with the shared options and write the output, one task (process)
    at a time; returns the slices written."""
    from tfprof.collector.errors import InvalidArgument
    from tfprof.collector.export import format_for, write_timeline
    from tfprof.collector.terminal import progress
    from tfprof.collector.timeline.build import timeline_parts
    from tfprof.collector.timeline.time_origin import first_record_ns
    from tfprof.collector.timespec import parse_time, parse_window

    format_for(args.output, args.format)  # a bad name fails before any work
    window: tuple[int | None, int | None] | None = None
    since, until = getattr(args, "since", None), getattr(args, "until", None)
    if args.window and (since or until):
        raise InvalidArgument("give --window or --since/--until, not both")
    if args.window:
        window = parse_window(args.window, first_record_ns(jobs))
    elif since or until:
        first = first_record_ns(jobs)
        window = (
            parse_time(since, first, "--since") if since else None,
            parse_time(until, first, "--until") if until else None,
        )
    with progress("finding the first event"):
        timeline = timeline_parts(jobs, group_by=args.group_by, window_ns=window)
    try:
        with progress(f"merging and writing {args.output}", unit="bytes") as advance:
            target = write_timeline(timeline, args.output, args.format, advance)
    except OSError as exc:  # the output the user named cannot be created or written
        raise PathError.from_os("output", args.output, exc) from exc
    print(f"tfprof-collector: wrote {target}: {timeline.num_slices:,} slices", file=sys.stderr)
    return timeline.num_slices


def run(args: argparse.Namespace) -> int:
    from tfprof.collector.lake.reader import open_jobs
    from tfprof.collector.terminal import progress

    where = ", ".join(args.data_dir)
    with progress(f"loading {where}"):
        # Segments and log tails, read one process at a time (lake/reader.py).
        jobs = open_jobs(args.data_dir, args.job or None).jobs
    if not jobs:
        raise NotFound(f"no jobs stored in {where}")
    write(jobs, args)
    return 0
