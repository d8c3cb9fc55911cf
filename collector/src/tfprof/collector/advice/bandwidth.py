"""Copies far below the link's bandwidth: large host<->device copies whose achieved
GB/s is a small fraction of what a PCIe link carries.

The collector does not know each GPU's link, so the reference is a nominal 12 GB/s (a
PCIe 3.0 x16 link in practice; 4.0 x16 reaches about 25): a copy under a quarter of it
is slow on any link tfprof runs on.
"""

from __future__ import annotations

import numpy as np

from tfprof.collector.advice.base import Context, Finding, us
from tfprof.collector.analysis.intervals import group_keys
from tfprof.core.cupti_labels import COPY_KINDS, MEMORY_KINDS
from tfprof.core.records import RecordKind

NAME = "slow-copies"
NOMINAL_LINK_GBPS = 12.0
SLOW_FRACTION = 0.25
MIN_BYTES = 1 << 20  # smaller copies are latency-bound; their rate says little
MIN_TIME_NS = 100_000


def check(ctx: Context) -> list[Finding]:
    rs = ctx.rs
    rows = np.flatnonzero(
        (rs.kind == RecordKind.MEMCPY)
        & np.isin(rs.copy_kind, np.array([1, 2]))
        & (rs.bytes >= MIN_BYTES)
        & (rs.end > rs.start)
    )
    if rows.shape[0] == 0:
        return []
    inverse, keys = group_keys(
        rs.job[rows], rs.copy_kind[rows], rs.src_kind[rows], rs.dst_kind[rows]
    )
    n = keys.shape[0]
    nbytes = np.bincount(inverse, weights=rs.bytes[rows], minlength=n)
    time = np.bincount(inverse, weights=rs.duration[rows], minlength=n)
    findings = []
    for i in range(n):
        gbps = float(nbytes[i]) / float(time[i])
        if gbps >= SLOW_FRACTION * NOMINAL_LINK_GBPS or time[i] < MIN_TIME_NS:
            continue
        j, kind, src, dst = (int(v) for v in keys[i])
        mine = rows[inverse == i]
        at_nominal = float(nbytes[i]) / NOMINAL_LINK_GBPS
        label = f"{COPY_KINDS.label(kind)} {MEMORY_KINDS.label(src)}->{MEMORY_KINDS.label(dst)}"
        job = rs.jobs[j].label
        findings.append(
            Finding(
                rule=NAME,
                title=f"job {job}: {label} copies of 1 MiB or more reach {gbps:.2f} GB/s, "
                f"under {SLOW_FRACTION:.0%} of a {NOMINAL_LINK_GBPS:g} GB/s link",
                impact_us=us(float(time[i]) - at_nominal),
                evidence={
                    "copy": label,
                    "copies": int(mine.shape[0]),
                    "bytes": round(float(nbytes[i])),
                    "copy_us": us(time[i]),
                    "gbps": round(gbps, 3),
                    "nominal_link_gbps": NOMINAL_LINK_GBPS,
                    "us_at_nominal": us(at_nominal),
                },
                suggestion=(
                    "Copy from pinned memory (pageable copies are staged by the driver), "
                    "batch many small transfers into one, and check the link: "
                    "`nvidia-smi -q | grep -A4 'Link'` for PCIe generation and width, and "
                    "that the process runs on the GPU's NUMA node (nvidia-smi topo -m)."
                ),
                start_ns=int(rs.start[mine].min()),
                end_ns=int(rs.end[mine].max()),
                jobs=(job,),
                streams=ctx.tracks_of(mine),
            )
        )
    return findings
