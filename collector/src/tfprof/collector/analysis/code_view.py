"""``summary --view code`` and ``--view lines``: tfprof's code view over the Python stacks
that launched the GPU work (code_sql.py attributes, code_tree.py shapes).

    code   the call-path tree, depth first: per node self and total GPU time, total
           kernels and launches, self and total host time (from the stack sampler)
    lines  one row per source line (file:line:function): self and total as above, a
           stack counted once in the total of each line on it
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tfprof.collector.analysis import code_sql
from tfprof.collector.analysis.code_read import Attribution, HowCount
from tfprof.collector.analysis.code_tree import (
    GPU_NS,
    HOST_NS,
    KERNELS,
    LAUNCHES,
    NEAR_NS,
    Display,
    Leaf,
    Node,
    SortKey,
    build,
    by_total,
    fold,
    lines,
    shown,
    starts,
)
from tfprof.collector.analysis.filters import Filters, apply_filters
from tfprof.collector.analysis.units import pct, us
from tfprof.collector.analysis.view_render import ViewReport, seconds_text
from tfprof.collector.errors import AnalysisError

NAME_FIELD = "code"
TIME_FIELD = "total_us"
HIDDEN = ("file", "line", "function")


@dataclass(frozen=True)
class CodeFilters:
    """The code views' own filters, beside the views' common ones."""

    start_name_regex: str | None = None
    trim_name_regex: str | None = None


@dataclass(frozen=True)
class CodeRow:
    code: str  # file:line:function (a library's file from its package)
    depth: int  # 1: a root of what is shown
    self_us: float  # GPU time of work launched with this frame innermost
    total_us: float  # GPU time of work launched under this frame
    kernels: int  # kernels launched under it
    launches: int  # launching calls under it
    self_host_us: float  # sampled threads' time with this frame innermost
    total_host_us: float  # sampled threads' time under this frame
    nearest_pct: float  # of total_us, attributed through the nearest sample (not exactly)
    file: str
    line: int
    function: str


@dataclass(frozen=True)
class LineRow:
    code: str
    self_us: float
    total_us: float
    kernels: int
    launches: int
    self_host_us: float
    total_host_us: float
    nearest_pct: float
    file: str
    line: int
    function: str


def _regex(pattern: str | None, flag: str) -> re.Pattern[str] | None:
    if not pattern:
        return None
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise AnalysisError(f"{flag}: invalid regular expression {pattern!r}: {exc}") from None


def folded(att: Attribution, code: CodeFilters) -> list[Leaf]:
    trim = _regex(code.trim_name_regex, "--trim-name-regex")
    return [Leaf(fold(leaf.path, trim), leaf.values) for leaf in att.leaves]


def code_rows(att: Attribution, filters: Filters, code: CodeFilters) -> list[CodeRow]:
    if filters.max_depth is not None and filters.max_depth < 1:
        raise AnalysisError("--max-depth must be >= 1")
    if filters.min_micros is not None and filters.min_micros < 0:
        raise AnalysisError("--min-micros must be >= 0")
    display = Display(
        start=_regex(code.start_name_regex, "--start-name-regex"),
        show=_regex(filters.show_name_regex, "--show-name-regex"),
        hide=_regex(filters.hide_name_regex, "--hide-name-regex"),
        max_depth=filters.max_depth,
        min_gpu_ns=(filters.min_micros or 0.0) * 1000,
    )
    root = build(folded(att, code))
    key = _sibling_order(filters.order_by) if filters.order_by else by_total
    return [
        _code_row(att, node.name, depth, node.own, node.total)
        for node, depth in shown(starts(root, display.start), display, key)
    ]


_NODE_FIELDS: dict[str, Callable[[Node], float]] = {
    "self_us": lambda n: n.own[GPU_NS],
    "total_us": lambda n: n.total[GPU_NS],
    "kernels": lambda n: n.total[KERNELS],
    "launches": lambda n: n.total[LAUNCHES],
    "self_host_us": lambda n: n.own[HOST_NS],
    "total_host_us": lambda n: n.total[HOST_NS],
    "nearest_pct": lambda n: n.total[NEAR_NS] / n.total[GPU_NS] if n.total[GPU_NS] else 0.0,
}


def _sibling_order(field: str) -> SortKey:
    """--order-by for the tree: siblings by ``field`` (numbers descending, names ascending)."""
    value = _NODE_FIELDS.get(field)
    if value is not None:
        return lambda n: (-value(n), *by_total(n))
    if field in ("code", "file", "function", "line"):
        return lambda n: (n.name,)
    raise AnalysisError(
        f"--order-by: no field {field!r} to order siblings by; fields are "
        + ", ".join(("code", *_NODE_FIELDS))
    )


def _code_row(att: Attribution, name: str, depth: int, own: list[float], total: list[float]
              ) -> CodeRow:  # fmt: skip
    return CodeRow(depth=depth, **_figures(att, name, own, total))


def _figures(att: Attribution, name: str, own: list[float], total: list[float]
             ) -> dict[str, Any]:  # fmt: skip
    """What a code row and a line row both say of ``name``."""
    file, line, function = att.frames.get(name, ("", 0, name))
    return {
        "code": name,
        "self_us": us(own[GPU_NS]),
        "total_us": us(total[GPU_NS]),
        "kernels": int(total[KERNELS]),
        "launches": int(total[LAUNCHES]),
        "self_host_us": us(own[HOST_NS]),
        "total_host_us": us(total[HOST_NS]),
        "nearest_pct": pct(total[NEAR_NS], total[GPU_NS]),
        "file": file,
        "line": line,
        "function": function,
    }


def line_rows(att: Attribution, filters: Filters, code: CodeFilters) -> list[LineRow]:
    start = _regex(code.start_name_regex, "--start-name-regex")
    if filters.max_depth is not None and filters.max_depth < 1:
        raise AnalysisError("--max-depth must be >= 1")
    per_line = lines(folded(att, code), start, filters.max_depth)
    rows = [LineRow(**_figures(att, name, own, total)) for name, (own, total) in per_line.items()]
    rows.sort(key=lambda r: (-r.self_us, -r.total_us, -r.self_host_us, r.code))
    return rows


def attribution_notes(att: Attribution) -> tuple[str, ...]:
    """How the GPU work found its stacks, and what the host time rests on."""
    how = {h: att.how.get(h, HowCount()) for h in code_sql.HOW}
    records = sum(c.records for c in how.values())
    ns = sum(c.ns for c in how.values())
    notes = []
    found = how[code_sql.EXACT].records + how[code_sql.NEAREST].records
    if not found and not att.host_samples:
        return (
            "no Python stacks: the job ran with --code off, stacks were not recorded (a "
            "Kineto trace without with_stack=True), or nothing ran in the window",
        )
    if records:
        text = (
            f"GPU work by launching stack: {found:,} of {records:,} records "
            f"({pct(how[code_sql.EXACT].ns + how[code_sql.NEAREST].ns, ns):.1f} % of "
            f"{seconds_text(ns / 1e9)}); {how[code_sql.EXACT].records:,} exactly (launch "
            f"captures), {how[code_sql.NEAREST].records:,} by the nearest sample on the "
            f"launching thread"
        )
        near = how[code_sql.NEAREST].records
        if near:
            text += (
                f" (on average {seconds_text(att.gap_sum / near / 1e9)} before the call, "
                f"at most {seconds_text(att.gap_max / 1e9)})"
            )
        missing = [
            f"{how[h].records:,} {label}"
            for h, label in (
                (code_sql.NO_CALL, "with no launching call recorded"),
                (code_sql.NO_SAMPLE, "with no sample of the launching thread in the second before"),
            )
            if how[h].records
        ]
        notes.append(text + ("; " + ", ".join(missing) if missing else ""))
    if att.host_samples:
        notes.append(
            f"host time from {att.host_samples:,} stack samples of {att.host_threads:,} "
            f"thread(s): time a thread spent there, running or waiting in a call"
        )
    return tuple(notes)


def code_report(view: str, att: Attribution, filters: Filters, code: CodeFilters) -> ViewReport:
    """The ``code`` or ``lines`` view: rows, then --top and --select as every view has."""
    if view == "code":
        rows: list[CodeRow] | list[LineRow] = code_rows(att, filters, code)
        row_type: type = CodeRow
        tail = Filters(select=filters.select, top=filters.top)
    else:
        rows = line_rows(att, filters, code)
        row_type = LineRow
        tail = Filters(
            min_micros=filters.min_micros,
            order_by=filters.order_by,
            select=filters.select,
            show_name_regex=filters.show_name_regex,
            hide_name_regex=filters.hide_name_regex,
            top=filters.top,
        )
    out, fields = apply_filters(rows, row_type, NAME_FIELD, TIME_FIELD, tail)
    if not filters.select:
        fields = tuple(f for f in fields if f not in HIDDEN)
    return ViewReport(
        view=view,
        jobs=tuple(att.jobs),
        start_ns=att.start_ns,
        end_ns=att.end_ns,
        fields=fields,
        rows=out,
        notes=attribution_notes(att),
        indent=NAME_FIELD if view == "code" else "",
    )
