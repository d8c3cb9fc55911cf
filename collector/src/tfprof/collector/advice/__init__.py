"""``advise``: rules over the collected records, each a module with ``NAME`` and
``check(ctx)``, findings ranked by the time at stake.

    findings = advise(prepare(jobs))
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType

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
from tfprof.collector.advice.base import Context, Finding
from tfprof.collector.advice.host_rows import HostRows
from tfprof.collector.analysis.errors import AnalysisError
from tfprof.collector.analysis.records import GpuFirst, RecordSet

RULES: tuple[ModuleType, ...] = (
    gpu_idle,
    copy_overlap,
    pageable,
    tiny_kernels,
    single_stream,
    time_slicing,
    sync_stalls,
    bandwidth,
    launch_bound,
    host_stalls,
    sync_per_step,
    memory_capacity,
)
RULE_NAMES = tuple(r.NAME for r in RULES)
# Rules that read the host side (API calls, ranges, memory records); the others read
# GPU records only, so a reader may leave the host side out when none of these runs.
HOST_RULES = frozenset(
    {launch_bound.NAME, host_stalls.NAME, sync_per_step.NAME, memory_capacity.NAME}
)


# GPU record columns the host rules never read (nor the host pass, nor what renders
# findings): released before the host side is read (a quarter of the GPU table).
GPU_RULES_ONLY = ("bytes", "copy_kind", "src_kind", "dst_kind", "sync_type")


def needs_host(rules: Sequence[str] | None) -> bool:
    """Whether the named rules (all when none is named) read host records."""
    return not rules or bool(HOST_RULES & set(rules))


def advise(
    rs: RecordSet, rules: Sequence[str] | None = None, host_rows: HostRows | None = None
) -> list[Finding]:
    """Findings of the named rules (all when none is named), largest impact first.

    ``host_rows``: the selector ``rs`` was prepared with (``prepare(select=...)``), when
    ``rs.host`` holds only the rows it kept: the host rules read its evidence."""
    chosen = _chosen(rules)
    return _ranked(_check(Context(rs, host_rows), chosen))


def advise_gpu_first(table: GpuFirst, rules: Sequence[str] | None = None) -> list[Finding]:
    """``advise`` over a GPU table from ``prepare_gpu_first``: the GPU rules run first
    and what they computed is freed, with the GPU columns only they read, before the
    host side is read (``GpuFirst.read``, streamed past ``HostRows``) for the host
    rules, so the GPU rules' intermediates and the host rules' evidence are never held
    together. ``table.rs`` is then the linked set the host rules read."""
    chosen = _chosen(rules)
    host_rules = [r for r in chosen if r.NAME in HOST_RULES]
    ctx = Context(table.rs)
    # host-stalls' gaps come from the GPU busy time the GPU rules compute: found now,
    # while that is cached, they are not merged from every GPU record again later.
    gaps = ctx.long_gaps if host_stalls in host_rules else None
    findings = _check(ctx, [r for r in chosen if r.NAME not in HOST_RULES])
    del ctx
    if host_rules:
        table.release(GPU_RULES_ONLY)
        rows = HostRows(gaps)
        findings += _check(Context(table.read(rows), rows), host_rules)
    return _ranked(findings)


def _chosen(rules: Sequence[str] | None) -> list[ModuleType]:
    unknown = sorted(set(rules or ()) - set(RULE_NAMES))
    if unknown:
        raise AnalysisError(
            f"unknown rule(s) {', '.join(unknown)}; rules are {', '.join(RULE_NAMES)}"
        )
    return [rule for rule in RULES if not rules or rule.NAME in rules]


def _check(ctx: Context, rules: Sequence[ModuleType]) -> list[Finding]:
    """The rules in order; after each, what no later rule reads is freed."""
    findings: list[Finding] = []
    names = [rule.NAME for rule in rules]
    for i, rule in enumerate(rules):
        findings.extend(rule.check(ctx))
        ctx.release(names[i + 1 :])
    return findings


def _ranked(findings: list[Finding]) -> list[Finding]:
    findings.sort(key=lambda f: (-f.impact_us, f.rule, f.title))
    return findings


__all__ = [
    "GPU_RULES_ONLY", "HOST_RULES", "RULES", "RULE_NAMES", "Finding", "HostRows", "advise",
    "advise_gpu_first",
    "needs_host",
]  # fmt: skip
