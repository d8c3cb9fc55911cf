"""``tfprof-collector export``: merge stored jobs into one timeline file."""

from __future__ import annotations

import argparse
import sys

from tfprof.collector.errors import NotFound


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("export", help="merge jobs into one timeline file")
    p.add_argument("--data-dir", required=True, metavar="DIR")
    p.add_argument(
        "--job", action="append", metavar="NAME", help="job to include (repeatable; default: all)"
    )
    p.add_argument(
        "--group-by",
        choices=("job", "gpu"),
        default="job",
        help="job: tracks per job/task/GPU/stream; gpu: every job's streams under the "
        "physical GPU they ran on (default: job)",
    )
    p.add_argument("--format", default=None, help="output format (default: from the suffix)")
    p.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="FILE",
        help="output file, .json or .json.gz (Chrome trace format)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
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
