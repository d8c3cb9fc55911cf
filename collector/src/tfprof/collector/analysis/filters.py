"""tfprof-style filters over a view's rows: --min-micros, --show/--hide-name-regex,
--order-by, --top, --select. Rows are the views' dataclasses; nothing here computes."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tfprof.collector.errors import AnalysisError


@dataclass(frozen=True)
class Filters:
    min_micros: float | None = None  # on the view's time field
    order_by: str | None = None  # numbers descending, text ascending
    select: tuple[str, ...] | None = None  # fields to show, in this order
    show_name_regex: str | None = None  # keep rows whose name field matches (search)
    hide_name_regex: str | None = None  # drop rows whose name field matches
    top: int | None = None
    max_depth: int | None = None  # hide rows deeper than this (views with a depth field)


def field_names(row_type: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(row_type))


def _regex(pattern: str, flag: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise AnalysisError(f"{flag}: invalid regular expression {pattern!r}: {exc}") from None


def apply_filters(
    rows: Sequence[Any],
    row_type: type,
    name_field: str,
    time_field: str,
    filters: Filters,
    depth_field: str = "",
) -> tuple[list[Any], tuple[str, ...]]:
    """The rows that pass, ordered and cut, and the fields to show.

    An empty ``time_field`` / ``depth_field``: the view has none, and the filter on it
    is refused."""
    fields = field_names(row_type)

    def check(name: str, flag: str) -> str:
        if name not in fields:
            raise AnalysisError(f"{flag}: no field {name!r}; fields are {', '.join(fields)}")
        return name

    out = list(rows)
    if filters.max_depth is not None:
        if not depth_field:
            raise AnalysisError("--max-depth: this view is not a tree (the scope view is)")
        if filters.max_depth < 1:
            raise AnalysisError("--max-depth must be >= 1")
        out = [r for r in out if getattr(r, depth_field) <= filters.max_depth]
    if filters.min_micros is not None:
        if filters.min_micros < 0:
            raise AnalysisError("--min-micros must be >= 0")
        if not time_field:
            raise AnalysisError("--min-micros: this view has no time field")
        out = [r for r in out if getattr(r, time_field) >= filters.min_micros]
    if filters.show_name_regex:
        show = _regex(filters.show_name_regex, "--show-name-regex")
        out = [r for r in out if show.search(str(getattr(r, name_field)))]
    if filters.hide_name_regex:
        hide = _regex(filters.hide_name_regex, "--hide-name-regex")
        out = [r for r in out if not hide.search(str(getattr(r, name_field)))]
    if filters.order_by:
        key = check(filters.order_by, "--order-by")
        sample = getattr(out[0], key) if out else 0
        if isinstance(sample, (int, float)):
            out.sort(key=lambda r: -getattr(r, key))
        elif isinstance(sample, str):
            out.sort(key=lambda r: getattr(r, key))
        else:
            raise AnalysisError(f"--order-by: field {key!r} is a list and cannot order rows")
    if filters.top is not None:
        if filters.top < 0:
            raise AnalysisError("--top must be >= 0")
        out = out[: filters.top]
    shown = fields
    if filters.select:
        shown = tuple(check(name, "--select") for name in filters.select)
    return out, shown
