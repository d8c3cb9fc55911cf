"""``advise``: rules over the collected records, each a module with ``NAME`` and
``check(ctx)``, findings ranked by the time at stake.

    findings = advise(prepare(jobs))
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
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
from tfprof.collector.allocator import reusing_large_blocks
from tfprof.collector.analysis.intervals import Gaps
from tfprof.collector.analysis.records import GpuFirst, RecordSet
from tfprof.collector.errors import AnalysisError

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
# GPU records up to which the GPU rules run while the host side is read: their
# intermediates and the host pass's batches are then held at once, which saves time for a
# little more memory. Above it, where the bound is memory, they run one after the other.
CONCURRENT_GPU_ROWS = 1 << 22


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
    """``advise`` over a GPU table from ``prepare_gpu_first``: the GPU rules run on the
    GPU table alone, the host rules after the host side is read (``GpuFirst.read``,
    streamed past ``HostRows``). ``table.rs`` is then the linked set the host rules read.

    Up to ``CONCURRENT_GPU_ROWS`` GPU records the GPU rules run on a thread while the host
    side is read, the two on two cores, and temporaries of several MiB are reused
    (``allocator.reusing_large_blocks``). Above, the GPU rules run first, and what they
    computed is freed, with the GPU columns only they read, before the host side is
    read: their intermediates and the host rules' evidence are never held together."""
    chosen = _chosen(rules)
    host_rules = [r for r in chosen if r.NAME in HOST_RULES]
    gpu_rules = [r for r in chosen if r.NAME not in HOST_RULES]
    # Names the host pass adds go to the table's list: the GPU rules' copy stays as it is.
    ctx = Context(replace(table.rs, names=tuple(table.rs.names)))
    if not host_rules:
        return _ranked(_check(ctx, gpu_rules))
    # host-stalls' gaps come from the GPU busy time the GPU rules compute: found first,
    # while that is cached, they are not merged from every GPU record again later.
    stalls = host_stalls in host_rules
    if len(table.rs) <= CONCURRENT_GPU_ROWS:
        # Well inside the memory bound: the temporaries of several MiB are reused too.
        with reusing_large_blocks():
            with ThreadPoolExecutor(1, thread_name_prefix="tfprof-gpu-rules") as pool:
                # On the rules' thread, the host pass meanwhile: only the evidence
                # thread waits for them.
                rows = HostRows(pool.submit(_long_gaps, ctx) if stalls else None)
                gpu_findings = pool.submit(_check, ctx, gpu_rules)
                table.read(rows)
                findings = gpu_findings.result()
            del ctx, gpu_findings
            table.release(GPU_RULES_ONLY)
            findings += _check(Context(table.rs, rows), host_rules)
        return _ranked(findings)
    rows = HostRows(ctx.long_gaps if stalls else None)
    findings = _check(ctx, gpu_rules)
    del ctx
    table.release(GPU_RULES_ONLY)
    table.read(rows)
    findings += _check(Context(table.rs, rows), host_rules)
    return _ranked(findings)


def _long_gaps(ctx: Context) -> Gaps:
    return ctx.long_gaps


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
    "CONCURRENT_GPU_ROWS", "GPU_RULES_ONLY", "HOST_RULES", "RULES", "RULE_NAMES", "Finding",
    "HostRows", "advise", "advise_gpu_first",
    "needs_host",
]  # fmt: skip
