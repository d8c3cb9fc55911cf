"""Advice for distributed jobs: rules over the steps and collectives of every rank, read
through the read engine (``advise`` runs them with the other rules and ranks all the
findings by time at stake).

- ``straggler``: the rank the others waited for in the collectives matched across ranks
  (the k-th call of a process group on each rank), named in a step when the others'
  wait it caused, per other rank, is 1 % of the step or more;
- ``exposed-communication``: communication kernels that no compute kernel covers;
- ``step-variance``: ranks whose steady step time is far from the job's median rank,
  and steps far from their rank's median;
- ``input-bound``: steps whose GPU waits while the host is outside CUDA (input
  pipeline, Python) before and between the step's launches.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tfprof.collector.advice.base import Finding
from tfprof.collector.analysis.step_rows import STEPS_QUERY, StepRow, rank_rows, step_rows
from tfprof.collector.analysis.units import pct, us
from tfprof.collector.lake.collective_sql import (
    RANK_ARRIVAL_COLUMNS,
    RANK_ARRIVALS,
    STEP_ARRIVAL_COLUMNS,
    STEP_ARRIVALS,
)
from tfprof.collector.lake.dist_sql import ENGINE
from tfprof.collector.read.needs import Got, Query, Sweep

RANK_QUERY = Query(ENGINE.bind(RANK_ARRIVALS), gather="calls_out")
STEP_QUERY = Query(ENGINE.bind(STEP_ARRIVALS), gather="calls_out")
NAMED_SHARE = 0.01  # of a step: the wait a straggler caused each other rank, to name it
EXPOSED_SHARE = 0.05  # of the steps' device time, exposed communication worth a finding
SLOW_RANK = 1.10  # a rank's steady p50 over the job's median rank's
SLOW_STEP = 1.20  # a steady step over its rank's median
INPUT_SHARE = 0.10  # of steady step time idle outside CUDA
NAMES = ("straggler", "exposed-communication", "step-variance", "input-bound")


def _window(steps: Sequence[StepRow]) -> tuple[int, int]:
    if not steps:
        return 0, 0
    return min(s.start_ns for s in steps), max(
        s.start_ns + int(s.duration_us * 1000) for s in steps
    )


def _by_rank(steps: Sequence[StepRow]) -> dict[tuple[str, str], list[StepRow]]:
    out: dict[tuple[str, str], list[StepRow]] = {}
    for s in steps:
        out.setdefault((s.job, s.task), []).append(s)
    return out


@dataclass(frozen=True)
class DistRules:
    """The four rules as one need (they share the steps); ``names``: those to run."""

    names: tuple[str, ...] = NAMES

    def queries(self) -> Sequence[Query]:
        out = [STEPS_QUERY]
        if "straggler" in self.names:
            out += [RANK_QUERY, STEP_QUERY]
        return out

    def sweeps(self) -> Sequence[Sweep[Any]]:
        return ()

    def build(self, got: Got) -> list[Finding]:
        steps = step_rows(got)
        found: list[Finding] = []
        if "straggler" in self.names:
            found += _stragglers(got, steps)
        if "exposed-communication" in self.names:
            found += _exposed(got, steps)
        if "step-variance" in self.names:
            found += _variance(steps)
        if "input-bound" in self.names:
            found += _input_bound(steps)
        return found


def _stragglers(got: Got, steps: Sequence[StepRow]) -> list[Finding]:
    read = got.read
    ranks = [dict(zip(RANK_ARRIVAL_COLUMNS, r, strict=True)) for r in got.rows(RANK_QUERY)]
    per_step = [dict(zip(STEP_ARRIVAL_COLUMNS, r, strict=True)) for r in got.rows(STEP_QUERY)]
    step_ns: dict[tuple[int, int], list[float]] = {}
    label_job = {j.label: i for i, j in enumerate(read.jobs)}
    for s in steps:
        step_ns.setdefault((label_job[s.job], s.step), []).append(s.duration_us * 1000)
    found = []
    for job in sorted({int(r["jb"]) for r in ranks}):
        mine = [r for r in ranks if int(r["jb"]) == job]
        n = len(mine)
        worst = max(mine, key=lambda r: (int(r["caused_ns"]), -int(r["rk"])))
        caused = int(worst["caused_ns"])
        if n < 2 or caused <= 0:
            continue
        rk = int(worst["rk"])
        named, seen = 0, 0
        for step in sorted({int(p["step"]) for p in per_step if int(p["jb"]) == job}):
            rows = [p for p in per_step if int(p["jb"]) == job and int(p["step"]) == step]
            seen += 1
            top = max(rows, key=lambda p: (int(p["caused_ns"]), -int(p["rk"])))
            lengths = step_ns.get((job, step))
            share = int(top["caused_ns"]) / (n - 1)
            if (
                lengths
                and int(top["rk"]) == rk
                and share >= NAMED_SHARE * statistics.median(lengths)
            ):
                named += 1
        if not named:
            continue
        ref = read.processes[rk]
        gpus = sorted(
            {s.gpu for s in steps if s.job == read.jobs[job].label and s.task == ref.task}
        )
        lo, hi = _window([s for s in steps if s.job == read.jobs[job].label])
        found.append(
            Finding(
                rule="straggler",
                title=f"rank {ref.task} of job {read.jobs[job].label} arrived last at "
                f"{int(worst['last'])} of {int(worst['matched'])} collectives; the others "
                f"waited {us(caused) / 1e3:,.1f} ms for it",
                impact_us=us(caused / (n - 1)),
                evidence={
                    "job": read.jobs[job].label,
                    "rank": ref.task,
                    "host": ref.host,
                    "gpu": ", ".join(gpus),
                    "ranks": n,
                    "arrived_last": int(worst["last"]),
                    "collectives": int(worst["matched"]),
                    "steps_named": named,
                    "steps": seen,
                    "others_waited_us": us(caused),
                    "mean_skew_us": us(int(worst["skew_sum"]) / max(int(worst["matched"]), 1)),
                    "max_skew_us": us(int(worst["skew_max"])),
                },
                suggestion="Look at what this rank does before its collectives (its steps "
                "view: input pipeline, host work, a slower GPU or link, thermal throttling); "
                "compare its host and GPU with the others'.",
                start_ns=lo,
                end_ns=hi,
                jobs=(read.jobs[job].label,),
            )
        )
    return found


def _exposed(got: Got, steps: Sequence[StepRow]) -> list[Finding]:
    found = []
    for rank in rank_rows(got):
        mine = [s for s in _by_rank(steps)[(rank.job, rank.task)] if s.gpu == rank.gpu]
        exposed = sum(s.comm_exposed_us for s in mine)
        span = sum(s.duration_us for s in mine)
        if not span or exposed < EXPOSED_SHARE * span:
            continue
        lo, hi = _window(mine)
        found.append(
            Finding(
                rule="exposed-communication",
                title=f"rank {rank.task} of job {rank.job}: communication exposed "
                f"{rank.comm_exposed_pct:.1f} % of its step time",
                impact_us=round(exposed, 3),
                evidence={
                    "job": rank.job,
                    "rank": rank.task,
                    "host": rank.host,
                    "gpu": rank.gpu,
                    "steps": rank.steps,
                    "exposed_us": round(exposed, 3),
                    "comm_pct": rank.comm_pct,
                    "comm_exposed_pct": rank.comm_exposed_pct,
                    "overlap_pct": rank.overlap_pct,
                },
                suggestion="Overlap communication with compute: DDP bucketing "
                "(bucket_cap_mb), FSDP/ZeRO prefetch, launching collectives on a side "
                "stream before the compute that does not need them; see summary --view "
                "collectives for which collectives are exposed.",
                start_ns=lo,
                end_ns=hi,
                jobs=(rank.job,),
            )
        )
    return found


def _variance(steps: Sequence[StepRow]) -> list[Finding]:
    found = []
    jobs: dict[str, dict[str, list[StepRow]]] = {}
    for (job, task), rows in _by_rank(steps).items():
        steady = [s for s in rows if not s.warmup]
        if steady:
            jobs.setdefault(job, {})[task] = steady
    for job, ranks in sorted(jobs.items()):
        p50 = {t: statistics.median(s.duration_us for s in rows) for t, rows in ranks.items()}
        middle = statistics.median(p50.values())
        slow_ranks = {t: v for t, v in p50.items() if len(p50) > 1 and v > SLOW_RANK * middle}
        excess = sum((v - middle) * len(ranks[t]) for t, v in slow_ranks.items())
        slow_steps = [
            s for t, rows in ranks.items() for s in rows if s.duration_us > SLOW_STEP * p50[t]
        ]
        excess += sum(s.duration_us - p50[s.task] for s in slow_steps)
        total = sum(s.duration_us for rows in ranks.values() for s in rows)
        if not total or excess < 0.01 * total:
            continue
        lo, hi = _window([s for rows in ranks.values() for s in rows])
        found.append(
            Finding(
                rule="step-variance",
                title=f"job {job}: {len(slow_ranks)} rank(s) slower than the median rank by "
                f"{100 * (SLOW_RANK - 1):.0f} %+, {len(slow_steps)} step(s) "
                f"{100 * (SLOW_STEP - 1):.0f} %+ over their rank's median",
                impact_us=round(excess, 3),
                evidence={
                    "job": job,
                    "median_rank_step_us": round(middle, 3),
                    "slow_ranks": {t: round(v, 3) for t, v in sorted(slow_ranks.items())},
                    "slow_steps": [
                        f"rank {s.task} step {s.step}: {s.duration_us:,.0f} us"
                        for s in slow_steps[:8]
                    ],
                    "excess_pct": pct(excess, total),
                },
                suggestion="Compare the slow ranks' and steps' breakdown (summary --view "
                "steps): idle outside CUDA points at input or host work, sync at blocking "
                "copies, exposed communication at the network.",
                start_ns=lo,
                end_ns=hi,
                jobs=(job,),
            )
        )
    return found


def _input_bound(steps: Sequence[StepRow]) -> list[Finding]:
    found = []
    for (job, task), rows in sorted(_by_rank(steps).items()):
        steady = [s for s in rows if not s.warmup] or rows
        outside = sum(s.idle_outside_cuda_us for s in steady)
        span = sum(s.duration_us for s in steady)
        if not span or outside < INPUT_SHARE * span:
            continue
        waiting = [s for s in steady if s.idle_outside_cuda_us >= INPUT_SHARE * s.duration_us]
        lo, hi = _window(steady)
        found.append(
            Finding(
                rule="input-bound",
                title=f"rank {task} of job {job}: the GPU waited on the host outside CUDA "
                f"{pct(outside, span):.1f} % of its step time",
                impact_us=round(outside, 3),
                evidence={
                    "job": job,
                    "rank": task,
                    "host": steady[0].host,
                    "gpu": steady[0].gpu,
                    "steps": len(steady),
                    "steps_waiting": len(waiting),
                    "idle_outside_cuda_us": round(outside, 3),
                    "mean_first_launch_us": round(
                        statistics.mean(s.first_launch_us for s in steady), 3
                    ),
                },
                suggestion="Feed the GPU ahead of time: more DataLoader workers, "
                "pin_memory and non_blocking copies, prefetching (tf.data prefetch), and "
                "less Python between steps (logging, .item() calls).",
                start_ns=lo,
                end_ns=hi,
                jobs=(job,),
            )
        )
    return found
