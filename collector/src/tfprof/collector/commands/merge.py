"""``tfprof-collector merge``: merge trace files into one timeline, no data dir needed."""

from __future__ import annotations

import argparse

from tfprof.collector.commands.export import add_output_options
from tfprof.collector.commands.import_ import SHIFT_HELP


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "merge",
        help="merge trace files into one timeline file",
        description="Merge trace files (any format `import` reads) into one timeline with "
        "the same track names as `export`. --as steps: the files are successive steps "
        "of one job and share its tracks, one after another; --as jobs: each file is a "
        "job of its own, on its own tracks, side by side. tfprof's own files keep the "
        "jobs and tasks they were recorded with; other formats are named after the file.",
    )
    p.add_argument("inputs", nargs="+", metavar="IN", help="trace files to merge, in order")
    p.add_argument(
        "--as",
        dest="as_",
        choices=("steps", "jobs"),
        default="steps",
        help="steps (default): one job, files consecutive on shared tracks; jobs: one job "
        "per file (as recorded; other formats named after the file), in parallel",
    )
    p.add_argument("--shift", default="auto", metavar="MODE", help=SHIFT_HELP)
    add_output_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tfprof.collector.commands.export import write
    from tfprof.collector.store.importer import jobs_from_files
    from tfprof.collector.terminal import progress

    with progress(f"reading {len(args.inputs)} file(s)"):
        jobs = jobs_from_files(args.inputs, args.as_ == "steps", args.shift)
    write(jobs, args)
    return 0
