"""``tfprof-collector summary``: tfprof-style views of collected GPU records."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from tfprof.collector.commands._analysis_input import add_input_arguments, load_catalog, output
from tfprof.collector.errors import InvalidArgument

if TYPE_CHECKING:
    from tfprof.collector.analysis.filters import Filters
    from tfprof.collector.analysis.view_render import ViewReport

DESCRIPTION = """\
Summarise the GPU records of stored jobs (--data-dir, --job) or of trace files.

views:
  kernels         per kernel name: count, total/avg/min/max us, % of GPU busy time
  kernels-by-job  the same per (job, kernel name)
  streams         per (job, task, device, stream): busy us (union of intervals), busy %
                  of the window, kernels, copies, memsets, syncs
  gpus            per physical GPU (UUID): busy/idle %, longest idle gaps and when,
                  each job's share
  memcpy          per copy kind x memory kinds: count, bytes, us, GB/s, % of copy time
                  overlapped with kernels on the same GPU
  jobs            per job: processes, GPUs, kernel/copy/memset/sync time, records, dropped

host side (CUDA API calls, host ranges and memory records: --api/--nvtx/--memory, or
Kineto and TF timeline traces):
  op              per op (the framework op, NVTX range or annotation a GPU record ran
                  for): ranges, GPU time, kernels, CPU time in the launching calls, the
                  ranges' own time; tfprof's `op -select micros -order_by micros`
  scope           the ops' name-scope tree (names split at /, TF ops by node name): self
                  and total GPU time per scope; --max-depth N as tfprof's -max_depth
  api             per CUDA API function: calls, total/mean/median/min/max/stddev us,
                  errors (as nsys stats' cuda_api_sum)
  launch          per kernel name: launch latency (kernel start - call end), CPU launch
                  time (the call's duration), stream queue depth at launch (as HTA)
  memory          per job and GPU: peak device memory, when, % of the GPU's memory,
                  allocations, releases, the level over 8 slices of the window

Python code (stacks the agent recorded with --code sample|launch, or a Kineto trace
recorded with_stack=True):
  code            tfprof's code view: the tree of Python call paths that launched the
                  GPU work, self and total GPU time, kernels, launches, host time;
                  --start/--trim-name-regex, --max-depth as tfprof had them
  lines           per source line (file:line:function): the same figures, flat
  memory --by code  the device memory live at each job's peak, by the Python line that
                  allocated it

examples:
  tfprof-collector summary trace.json.gz --view op --top 20
  tfprof-collector summary --data-dir DIR --job train --view scope --max-depth 2
  tfprof-collector summary trace.json.gz --view api --format csv -o api.csv
  tfprof-collector summary --data-dir DIR --view code --trim-name-regex 'torch/'

Filters apply in this order: --min-micros, --show/--hide-name-regex, --order-by, --top;
--select picks the fields shown. Field names are those of --format json (the header
of --format csv lists them).
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from tfprof.collector.analysis.view_table import VIEW_NAMES

    p = sub.add_parser(
        "summary",
        help="tfprof-style views: kernels, streams, gpus, memcpy, jobs, op, scope, api, "
        "launch, memory, code, lines",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_input_arguments(p)
    p.add_argument(
        "--view", choices=(*VIEW_NAMES, *CODE_VIEWS), default="kernels", help="(default: kernels)"
    )
    p.add_argument(
        "--min-micros",
        type=float,
        metavar="US",
        help="keep rows whose time field (kernels: total_us, streams/gpus: busy_us, "
        "memcpy: total_us, jobs: kernel_us, op: gpu_us, scope: total_us, api: total_us, "
        "launch: launch_cpu_us; memory has none) is at least US (default: keep all)",
    )
    p.add_argument(
        "--max-depth",
        type=int,
        metavar="N",
        help="scope and code views: show nodes down to depth N (1: top level); deeper ones "
        "still count in their ancestors' totals (default: all depths)",
    )
    p.add_argument("--order-by", metavar="FIELD", help="sort by FIELD (numbers descending)")
    p.add_argument(
        "--select", metavar="FIELDS", help="comma-separated fields to show, in that order"
    )
    p.add_argument(
        "--show-name-regex",
        metavar="RE",
        help="keep rows whose name matches RE (kernels/api/launch: name, streams: track, "
        "gpus: uuid, memcpy: copy, jobs/memory: job, op: op, scope: scope) (default: all)",
    )
    p.add_argument(
        "--hide-name-regex",
        metavar="RE",
        help="drop rows whose name matches RE (code view: their shown descendants move up "
        "to the nearest shown ancestor, as tfprof's -hide_name_regexes)",
    )
    p.add_argument(
        "--by",
        choices=("gpu", "code"),
        default="gpu",
        help="memory view: gpu, per job and GPU; code, the bytes live at each job's peak by "
        "the Python line that allocated them (default: gpu)",
    )
    p.add_argument(
        "--start-name-regex",
        metavar="RE",
        help="code and lines views: show each call path from its first frame matching RE "
        "(tfprof's -start_name_regexes) (default: from the outermost frame)",
    )
    p.add_argument(
        "--trim-name-regex",
        metavar="RE",
        help="code and lines views: fold frames matching RE (e.g. 'torch/|<built-in') out "
        "of every stack: what they launched goes to the innermost frame left (default: none)",
    )
    p.add_argument("--top", type=int, metavar="N", help="show the first N rows only")
    p.set_defaults(func=run)


CODE_VIEWS = ("code", "lines")  # read through DuckDB (analysis/code_view.py)


def run(args: argparse.Namespace) -> int:
    from tfprof.collector.analysis.filters import Filters
    from tfprof.collector.analysis.view_render import reporter
    from tfprof.collector.analysis.view_table import read_view_report
    from tfprof.collector.terminal import progress

    by_code = args.view == "memory" and args.by == "code"
    if args.by == "code" and not by_code:
        raise InvalidArgument("--by code applies to the memory view")
    if not (by_code or args.view in CODE_VIEWS) and (args.start_name_regex or args.trim_name_regex):
        flag = "--start-name-regex" if args.start_name_regex else "--trim-name-regex"
        raise InvalidArgument(f"{flag} applies to the code, lines and memory --by code views")
    select = tuple(s.strip() for s in args.select.split(",") if s.strip()) if args.select else None
    filters = Filters(
        min_micros=args.min_micros,
        order_by=args.order_by,
        select=select,
        show_name_regex=args.show_name_regex,
        hide_name_regex=args.hide_name_regex,
        top=args.top,
        max_depth=args.max_depth,
    )
    if args.view in CODE_VIEWS or by_code:
        report = _code_report(args, filters)
    else:
        cat = load_catalog(args)
        with progress(f"reading {len(cat.processes):,} process(es)"):
            report = read_view_report(args.view, cat, filters)
    with output(args.output) as out:
        reporter(args.format, report).render(out)
    return 0


def _code_report(args: argparse.Namespace, filters: Filters) -> ViewReport:
    from tfprof.collector.analysis.code_read import read
    from tfprof.collector.analysis.code_view import CodeFilters, code_report
    from tfprof.collector.commands._code_input import code_connection
    from tfprof.collector.terminal import progress

    code = CodeFilters(args.start_name_regex, args.trim_name_regex)
    with progress("loading"), code_connection(args) as (con, scope):
        if args.view == "memory":
            from tfprof.collector.analysis.code_memory import memory_by_code

            return memory_by_code(con, scope, filters, code)
        att = read(con, scope)
    return code_report(args.view, att, filters, code)
