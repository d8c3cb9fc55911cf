"""``advise``: rules over the collected records, findings ranked by the time at stake.

Each rule is a module with ``NAME`` and ``RULE``, a read engine ``Need`` whose result is
its findings (``base.Rule``); ``advise`` reads the catalog once for every chosen rule
(equal queries and sweeps of two rules run once) and ranks what they find.

    read, findings = advise(catalog)
"""

from __future__ import annotations

from collections.abc import Sequence

from tfprof.collector.advice import (
    bandwidth,
    copy_overlap,
    gpu_idle,
    host_stalls,
    launch_bound,
    memory_capacity,
    pageable,
    single_stream,
    sync_per_step,
    sync_stalls,
    time_slicing,
    tiny_kernels,
)
from tfprof.collector.advice.base import Finding, Rule
from tfprof.collector.errors import AnalysisError
from tfprof.collector.read import engine
from tfprof.collector.read.engine import Read
from tfprof.collector.read.lake_catalog import Catalog
from tfprof.collector.read.needs import Need

RULES: tuple[Rule, ...] = (
    gpu_idle.RULE,
    copy_overlap.RULE,
    pageable.RULE,
    tiny_kernels.RULE,
    single_stream.RULE,
    time_slicing.RULE,
    sync_stalls.RULE,
    bandwidth.RULE,
    launch_bound.RULE,
    host_stalls.RULE,
    sync_per_step.RULE,
    memory_capacity.RULE,
)
RULE_NAMES = tuple(r.name for r in RULES)


def advise(
    cat: Catalog,
    rules: Sequence[str] | None = None,
    extra: Sequence[Need[list[Finding]]] = (),
) -> tuple[Read, list[Finding]]:
    """What the read covers, and the named rules' findings (all rules when ``rules`` is
    None, none when it is empty) with those of ``extra`` needs read alongside (the
    distributed rules), largest impact first."""
    chosen: list[Need[list[Finding]]] = [*_chosen(rules), *extra]
    read, found = engine.read(cat, chosen)
    findings = [f for part in found for f in part]
    findings.sort(key=lambda f: (-f.impact_us, f.rule, f.title))
    return read, findings


def _chosen(rules: Sequence[str] | None) -> list[Rule]:
    unknown = sorted(set(rules or ()) - set(RULE_NAMES))
    if unknown:
        raise AnalysisError(
            f"unknown rule(s) {', '.join(unknown)}; rules are {', '.join(RULE_NAMES)}"
        )
    return [rule for rule in RULES if rules is None or rule.name in rules]


__all__ = ["RULES", "RULE_NAMES", "Finding", "Rule", "advise"]
