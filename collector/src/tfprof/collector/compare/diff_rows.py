"""The two sides' totals side by side: one ``DiffRow`` per (kind, name), ranked by how
much its time per step changed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tfprof.collector.analysis.units import us
from tfprof.collector.compare.diff_totals import NameTotal

NAME_FIELD = "name"
TIME_FIELD = "abs_delta_per_step_us"
NEW, REMOVED = "new", "removed"


@dataclass(frozen=True)
class DiffRow:
    kind: str  # kernel, copy, sync, api, op, collective, phase
    name: str
    # new / removed (on one side only), else by count as HTA's TraceDiff: + more, - fewer,
    # = as many
    change: str
    base_count: int
    test_count: int
    delta_count: int
    base_per_step_us: float  # total time over the side's steps read
    test_per_step_us: float
    delta_per_step_us: float  # test - base
    delta_pct: float | None  # of base; None when the name is new or base's time is 0
    base_total_us: float
    test_total_us: float
    abs_delta_per_step_us: float  # |delta_per_step_us|: what rows are ranked by


def diff_rows(
    base: Sequence[NameTotal], test: Sequence[NameTotal], base_steps: int, test_steps: int
) -> list[DiffRow]:
    """Every (kind, name) of either side; per step = total / the side's step count."""
    a = {(t.kind, t.name): t for t in base}
    b = {(t.kind, t.name): t for t in test}
    rows = []
    for key in a.keys() | b.keys():
        x, y = a.get(key), b.get(key)
        base_count, base_ns = (x.count, x.total_ns) if x else (0, 0)
        test_count, test_ns = (y.count, y.total_ns) if y else (0, 0)
        base_step = base_ns / base_steps
        test_step = test_ns / test_steps
        delta = test_step - base_step
        rows.append(
            DiffRow(
                kind=key[0],
                name=key[1],
                change=_change(base_count, test_count),
                base_count=base_count,
                test_count=test_count,
                delta_count=test_count - base_count,
                base_per_step_us=us(base_step),
                test_per_step_us=us(test_step),
                delta_per_step_us=us(delta),
                delta_pct=round(100.0 * delta / base_step, 2) if base_step else None,
                base_total_us=us(base_ns),
                test_total_us=us(test_ns),
                abs_delta_per_step_us=us(abs(delta)),
            )
        )
    rows.sort(key=lambda r: (-r.abs_delta_per_step_us, r.kind, r.name))
    return rows


def _change(base: int, test: int) -> str:
    if not base:
        return NEW
    if not test:
        return REMOVED
    return "+" if test > base else "-" if test < base else "="
