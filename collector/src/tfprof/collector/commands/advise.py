"""``tfprof-collector advise``: rules over collected GPU records, ranked findings."""

from __future__ import annotations

import argparse

from tfprof.collector.commands._analysis_input import add_input_arguments, load_catalog, output

DESCRIPTION = """\
Run the advice rules over stored jobs (--data-dir, --job) or trace files and print what
they find, largest time at stake first, each with its evidence (numbers, time window,
jobs and streams) and a concrete suggestion.

rules:
  gpu-idle         a GPU idle during a job's time on it; copies or host gaps to blame
  copy-overlap     host<->device copy time with no kernel running on the GPU
  pageable-memory  copies from/to pageable host memory
  tiny-kernels     most kernels under 10 us: launch-bound
  single-stream    a process's kernels and copies all on one stream
  time-slicing     several jobs sharing one GPU: shares, switches between jobs
  sync-stalls      host time in CUDA synchronisation (SYNCHRONIZATION records)
  slow-copies      large copies far below a PCIe link's bandwidth
  launch-bound     CPU time launching kernels at least half their GPU time (API records)
  host-stalls      GPU idle in gaps >= 100 us while the host was in sync calls, other
                   CUDA calls or outside CUDA (API records)
  sync-per-step    more than 4 synchronising CUDA calls per step (API records; steps:
                   ProfilerStep#N or "step" ranges, else outermost host ranges)
  memory-capacity  peak device memory at 90% or more of the GPU's (MEMORY records)

distributed jobs (steps: ProfilerStep#N, the hook's step markers, else the kernel period):
  straggler        the rank the others waited for at the collectives matched across
                   ranks: how often it arrived last, how long the others waited
  exposed-communication  NCCL/RCCL kernel time under no compute kernel, 5%+ of steps
  step-variance    ranks 10%+ slower than the job's median rank, steps 20%+ over their
                   rank's median
  input-bound      the GPU waiting while the host is outside CUDA, 10%+ of step time
"""


# What --rule accepts: the rules' own names (``advice.RULE_NAMES``, then
# ``advice.dist_rules.NAMES``; tests/unit/test_cli_startup.py compares), written out
# because the parser is built on every command's start and must load no rule.
RULE_CHOICES = (
    "gpu-idle", "copy-overlap", "pageable-memory", "tiny-kernels", "single-stream",
    "time-slicing", "sync-stalls", "slow-copies", "launch-bound", "host-stalls",
    "sync-per-step", "memory-capacity", "straggler", "exposed-communication",
    "step-variance", "input-bound",
)  # fmt: skip


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "advise",
        help="run advice rules and print ranked findings with evidence and suggestions",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_input_arguments(p)
    p.add_argument(
        "--rule",
        action="append",
        choices=RULE_CHOICES,
        metavar="RULE",
        help="run only this rule (repeatable; default: all)",
    )
    p.add_argument("--top", type=int, metavar="N", help="show the first N findings only")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tfprof.collector.advice import advise
    from tfprof.collector.advice.advice_render import reporter
    from tfprof.collector.advice.dist_rules import NAMES, DistRules
    from tfprof.collector.analysis.notes import job_notes
    from tfprof.collector.errors import InvalidArgument
    from tfprof.collector.terminal import progress

    if args.top is not None and args.top < 0:
        raise InvalidArgument("--top must be >= 0")
    # The distributed rules are one need (they share the steps), read with the others.
    others = None if not args.rule else [r for r in args.rule if r not in NAMES]
    dist = tuple(n for n in NAMES if not args.rule or n in args.rule)
    extra = [DistRules(dist)] if dist else []
    cat = load_catalog(args)
    with progress(f"reading {len(cat.processes):,} process(es)"):
        read, findings = advise(cat, others, extra)
    if args.top is not None:
        findings = findings[: args.top]
    notes = job_notes(read.jobs, read.with_records)
    with output(args.output) as out:
        reporter(args.format, findings, read.start_ns, notes).render(out)
    return 0
