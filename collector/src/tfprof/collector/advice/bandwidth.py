"""Copies far below the link's bandwidth: large host<->device copies whose achieved
GB/s is a small fraction of what a PCIe link carries.

The collector does not know each GPU's link, so the reference is a nominal 12 GB/s (a
PCIe 3.0 x16 link in practice; 4.0 x16 reaches about 25): a copy under a quarter of it
is slow on any link tfprof runs on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tfprof.collector.advice.base import Finding, tracks, tracks_query, us
from tfprof.collector.read.needs import Got, Query, Sweep
from tfprof.core.cupti_labels import COPY_KINDS, MEMORY_KINDS

NAME = "slow-copies"
NOMINAL_LINK_GBPS = 12.0
SLOW_FRACTION = 0.25
MIN_BYTES = 1 << 20  # smaller copies are latency-bound; their rate says little
MIN_TIME_NS = 100_000
_GROUP = "job, copy_kind, src_kind, dst_kind"


def _large() -> str:
    return f"kind = 2 AND copy_kind IN (1, 2) AND bytes >= {MIN_BYTES} AND e > s"


def _copies() -> Query:
    """Per (job, copy kind, source and destination memory): large copies' bytes, time,
    count, first start, last end."""
    return Query(
        f"SELECT {_GROUP}, sum(bytes), sum(d), count(*), min(s), max(e) FROM {{g}} "
        f"WHERE {_large()} GROUP BY ALL"
    )


@dataclass(frozen=True)
class SlowCopies:
    name: str = NAME

    def queries(self) -> Sequence[Query]:
        return (_copies(), tracks_query(_large(), _GROUP))

    def sweeps(self) -> Sequence[Sweep[Any]]:
        return ()

    def build(self, got: Got) -> list[Finding]:
        read = got.read
        copies, found = self.queries()
        shown = tracks(read, got.rows(found), groups=4)
        findings = []
        for j, kind, src, dst, nbytes, time, n, first, last in sorted(got.rows(copies)):
            nbytes, time = float(nbytes), float(time)
            gbps = nbytes / time
            if gbps >= SLOW_FRACTION * NOMINAL_LINK_GBPS or time < MIN_TIME_NS:
                continue
            at_nominal = nbytes / NOMINAL_LINK_GBPS
            label = f"{COPY_KINDS.label(kind)} {MEMORY_KINDS.label(src)}->{MEMORY_KINDS.label(dst)}"
            job = read.jobs[j].label
            findings.append(
                Finding(
                    rule=NAME,
                    title=f"job {job}: {label} copies of 1 MiB or more reach {gbps:.2f} GB/s, "
                    f"under {SLOW_FRACTION:.0%} of a {NOMINAL_LINK_GBPS:g} GB/s link",
                    impact_us=us(time - at_nominal),
                    evidence={
                        "copy": label,
                        "copies": int(n),
                        "bytes": round(nbytes),
                        "copy_us": us(time),
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
                    start_ns=int(first),
                    end_ns=int(last),
                    jobs=(job,),
                    streams=shown[(j, kind, src, dst)],
                )
            )
        return findings


RULE = SlowCopies()
