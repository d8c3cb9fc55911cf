"""Launch-bound work: the CPU spends about as long launching kernels as the GPU spends
running them, so the GPU waits for the host (CUDA API records link each kernel to its
launching call).

Steady state only: each kernel name's first launch is left out, as it carries one-off
costs (module loading, autotuning) that fusing or CUDA graphs would not remove.
"""

from __future__ import annotations

import numpy as np

from tfprof.collector.advice.base import Context, Finding, share, us
from tfprof.core.records import RecordKind

NAME = "launch-bound"
RATIO = 0.5  # CPU launch time at least half the kernel time it launched
MIN_LAUNCHES = 50  # kernels linked to their launching call, first launches left out
MIN_LAUNCH_NS = 1_000_000  # 1 ms of launch time at least


def _steady(ctx: Context) -> np.ndarray:
    """Linked kernels but the first launch of each (job, kernel name): its earliest, the
    first row of those starting then. In row order."""
    rs = ctx.rs
    kernels = np.flatnonzero((rs.kind == RecordKind.KERNEL) & (rs.api >= 0))
    if not kernels.shape[0]:
        return kernels
    key = _pair_codes(rs.job[kernels], rs.name[kernels])
    start = rs.start[kernels]
    # The earliest start per pair in one pass, without sorting every kernel (a sort, or
    # np.unique's, costs far more).
    earliest = np.full(int(key.max()) + 1, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(earliest, key, start)
    at_first = np.flatnonzero(start == np.take(earliest, key))  # a few per pair
    del start
    _, first = np.unique(key[at_first], return_index=True)
    keep = np.ones(kernels.shape[0], dtype=bool)
    keep[at_first[first]] = False
    steady: np.ndarray = kernels[keep]
    return steady


def _pair_codes(job: np.ndarray, name: np.ndarray) -> np.ndarray:
    """A small int per distinct (job, name) pair: job x the names the rows use."""
    used = np.zeros(int(name.max()) + 1, dtype=bool)
    used[name] = True
    code = np.cumsum(used) - 1
    pairs = (int(job.max()) + 1) * int(code[-1] + 1)
    wide = np.dtype(np.int32 if pairs < 2**31 else np.int64)  # 4 bytes a kernel if they fit
    codes: np.ndarray = job.astype(wide)
    codes *= int(code[-1] + 1)
    codes += code.astype(wide)[name]
    if int(codes.max()) > 4 * codes.shape[0] + (1 << 20):  # many jobs: keep it small
        codes = np.unique(codes, return_inverse=True)[1].reshape(-1)
    return codes


def check(ctx: Context) -> list[Finding]:
    rs = ctx.rs
    h = rs.launch_calls()
    kernels = _steady(ctx)
    findings = []
    for j in np.unique(rs.job[kernels]).tolist():
        rows = kernels[rs.job[kernels] == j]
        # Each call once (a graph launch runs several kernels), in row order: a mask
        # over the host rows, not a sort of every kernel's call.
        called = np.zeros(h.duration.shape[0], dtype=bool)
        called[rs.api[rows]] = True
        calls = np.flatnonzero(called)
        launch = int(h.duration[calls].sum())
        kernel = int(rs.duration[rows].sum())
        if rows.shape[0] < MIN_LAUNCHES or launch < MIN_LAUNCH_NS or launch < RATIO * kernel:
            continue
        per_name = np.bincount(h.name[calls])  # names ids are small
        names = np.flatnonzero(per_name)
        counts = per_name[names]
        job = rs.jobs[j].label
        findings.append(
            Finding(
                rule=NAME,
                title=f"job {job}: launching {rows.shape[0]:,} kernels (first launches left "
                f"out) took {us(launch):,.0f} us "
                f"of CPU, {share(launch, kernel)}% of their {us(kernel):,.0f} us on the GPU",
                impact_us=us(launch),
                evidence={
                    "kernels": int(rows.shape[0]),
                    "launch_calls": int(calls.shape[0]),
                    "launch_cpu_us": us(launch),
                    "kernel_us": us(kernel),
                    "launch_to_kernel_pct": share(launch, kernel),
                    "launch_median_us": us(np.median(h.duration[calls])),
                    "kernel_median_us": us(np.median(rs.duration[rows])),
                    "latency_median_us": us(np.median(rs.latency[rows])),
                    "calls": {rs.names[int(n)]: int(c) for n, c in zip(names, counts, strict=True)},
                },
                suggestion=(
                    "Cut the number of launches: capture steady-state steps in CUDA graphs "
                    "(torch.cuda.graphs, XLA), fuse small ops (torch.compile, jit_compile=True), "
                    "and give each kernel more work (larger batches)."
                ),
                start_ns=int(rs.start[rows].min()),
                end_ns=int(rs.end[rows].max()),
                jobs=(job,),
                streams=ctx.tracks_of(rows),
            )
        )
    return findings
