"""``tfprof-collector diff``: what changed between two runs (compare/)."""

from __future__ import annotations

import argparse

DESCRIPTION = """\
Compare two runs: per kernel name, op, CUDA API function, collective and step phase, the
count and time of each side in the steps read, the time per step, its change (test -
base) and change %, and names only one side has (change: new, removed). Rows are ranked
by how much their time per step changed.

BASE and TEST are trace files (any format `import` reads: Kineto JSON, tfprof's Chrome
and Perfetto exports, TF timelines, StepStats), or, when a data dir applies to the side
(--data-dir for both, --base-data-dir / --test-data-dir for one), what they name there:
  JOB         the job's run (a job with several runs must name one)
  JOB/RUN     that run of the job (`tfprof-collector jobs` lists runs)
  capture:ID  the streams a capture reached, in its window (`captures` lists them)

steps (said in the output): each side's ProfilerStep#N ranges, else its STEP records
(the hook's zero-code markers), else the whole run is one step. Host rows belong to the
step their start is in, GPU work to the step of the CUDA call that launched it (as
HolisticTraceAnalysis' TraceDiff), so a side's per-name counts in one step equal
TraceDiff.compare_traces'. Time per step = the side's time in the steps read (every
process of it) / the number of steps read.

kinds: kernel, copy (memcpy, memset), sync, api (CUDA calls), op (framework ops, NVTX
ranges, annotations), collective (NCCL/RCCL kernels by collective), phase (per step:
step, compute, communication and its exposed / overlapped parts, copies, GPU busy, GPU
idle).

examples:
  tfprof-collector diff yesterday.json.gz today.json.gz --top 20
  tfprof-collector diff --data-dir DIR train/RUN1 train/RUN2 --kind kernel,phase
  tfprof-collector diff base.json.gz test.json.gz --steps first --format csv -o diff.csv
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "diff",
        help="what changed between two runs: per kernel, op, API call, collective, phase",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("base", metavar="BASE", help="the run to compare against")
    p.add_argument("test", metavar="TEST", help="the run compared with BASE")
    for flag, who in (("--data-dir", "both sides"), ("--base-data-dir", "BASE"),
                      ("--test-data-dir", "TEST")):  # fmt: skip
        p.add_argument(
            flag,
            action="append",
            metavar="DIR",
            help=f"{who}: a collector data dir, lake directory or URL where the side is "
            "JOB, JOB/RUN or capture:ID (repeatable: read as one)",
        )
    p.add_argument(
        "--steps",
        default="all",
        metavar="SPEC",
        help="steps to read: all, first (each side's first, TraceDiff's default), shared "
        "(numbers both sides have), or numbers and ranges for both: 4-6, 1009,1012 "
        "(default: all)",
    )
    p.add_argument(
        "--kind",
        metavar="KINDS",
        help="comma-separated kinds of rows: kernel, copy, sync, api, op, collective, "
        "phase (default: all)",
    )
    p.add_argument(
        "--format",
        choices=("table", "json", "csv"),
        default="table",
        help="table, json (summary's document plus the sides read) or csv (default: table)",
    )
    p.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    p.add_argument(
        "--min-micros",
        type=float,
        metavar="US",
        help="keep rows whose time per step changed by at least US (either way)",
    )
    p.add_argument(
        "--order-by", metavar="FIELD", help="sort by FIELD (numbers descending; default: "
        "the change of time per step, largest either way first)"
    )  # fmt: skip
    p.add_argument(
        "--select", metavar="FIELDS", help="comma-separated fields to show, in that order"
    )
    p.add_argument("--show-name-regex", metavar="RE", help="keep rows whose name matches RE")
    p.add_argument("--hide-name-regex", metavar="RE", help="drop rows whose name matches RE")
    p.add_argument("--top", type=int, metavar="N", help="show the first N rows only")
    p.set_defaults(func=run)


def _list(text: str | None) -> tuple[str, ...] | None:
    return tuple(s.strip() for s in text.split(",") if s.strip()) if text else None


def run(args: argparse.Namespace) -> int:
    from tfprof.collector.analysis.filters import Filters
    from tfprof.collector.commands._analysis_input import output
    from tfprof.collector.compare.diff_report import ALL_KINDS, compare, diff_reporter
    from tfprof.collector.compare.diff_side import open_side
    from tfprof.collector.terminal import progress

    filters = Filters(
        min_micros=args.min_micros,
        order_by=args.order_by,
        select=_list(args.select),
        show_name_regex=args.show_name_regex,
        hide_name_regex=args.hide_name_regex,
        top=args.top,
    )
    shared = args.data_dir or []
    with progress("comparing"):
        base = open_side("base", args.base, shared + (args.base_data_dir or []))
        test = open_side("test", args.test, shared + (args.test_data_dir or []))
        diff = compare(base, test, args.steps, _list(args.kind) or ALL_KINDS, filters)
    with output(args.output) as out:
        diff_reporter(args.format, diff).render(out)
    return 0
