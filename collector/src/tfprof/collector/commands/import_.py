"""``tfprof-collector import``: store recorded trace files as a job."""

from __future__ import annotations

import argparse
import sys

SHIFT_HELP = (
    "place the files in time: auto (default: steps one after another if they overlap, "
    "else as recorded; tasks as recorded if they overlap, else side by side), none (each "
    "keeps its own clock), to-first (all start with the first file), consecutive (each "
    "after the previous, in the order given), or a signed duration added to every file "
    "(+5s, -250ms)"
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "import",
        help="store recorded trace files as a job",
        description="Store trace files as one run of a job, like a live job: summaries, "
        "advice and exports treat it the same. Reads TF timeline JSON, Kineto JSON, "
        "tfprof's Chrome (.json[.gz]) and Perfetto (.pftrace) exports, and TensorFlow "
        "RunMetadata/StepStats (.pb, .pbtxt).",
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="trace files to store, in order")
    p.add_argument("--job", required=True, metavar="NAME", help="job name to store them under")
    p.add_argument(
        "--data-dir", required=True, metavar="DIR", help="collector data dir (created if missing)"
    )
    p.add_argument(
        "--as",
        dest="as_",
        choices=("steps", "tasks"),
        default=None,
        help="steps: the files are successive steps of one process, on one set of tracks; "
        "tasks: each file is its own task (process) of the job. Default: files that each "
        "name their rank (Kineto's distributedInfo) are the ranks of the job, each stored "
        "as the task of its rank on one timeline; other files are steps",
    )
    p.add_argument("--shift", default="auto", metavar="MODE", help=SHIFT_HELP)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tfprof.collector.store import Store
    from tfprof.collector.store.importer import import_files
    from tfprof.collector.terminal import progress

    with progress(f"importing {len(args.files)} file(s) into {args.data_dir}"):
        run_id, records = import_files(
            Store(args.data_dir),
            args.files,
            args.job,
            None if args.as_ is None else args.as_ == "steps",
            args.shift,
        )
    print(
        f"imported {len(args.files)} file(s) as job {args.job} run {run_id}: {records:,} records",
        file=sys.stderr,
    )
    return 0
