"""A diff of two sides, as summary's reports are made: rows, fields, notes; the JSON
document is summary's (``tfprof.summary/1``, view ``diff``) plus ``sides``, what each
side read (its origin, steps source and the steps read)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, TextIO

from tfprof.collector.analysis.filters import Filters, apply_filters
from tfprof.collector.analysis.view_render import (
    SCHEMA,
    CsvReporter,
    Reporter,
    TableReporter,
    ViewReport,
    iso,
)
from tfprof.collector.compare.diff_phases import phase_queries, phase_totals
from tfprof.collector.compare.diff_read import read_rows
from tfprof.collector.compare.diff_rows import NAME_FIELD, TIME_FIELD, DiffRow, diff_rows
from tfprof.collector.compare.diff_side import Side
from tfprof.collector.compare.diff_steps import (
    Steps,
    describe,
    find_steps,
    select_steps,
    steps_sql,
)
from tfprof.collector.compare.diff_totals import KINDS, NameTotal, name_totals, totals_query
from tfprof.collector.errors import AnalysisError

ALL_KINDS = (*KINDS, "phase")
HIDDEN = ("abs_delta_per_step_us",)


@dataclass(frozen=True)
class SideRead:
    """What one side read, for the report's ``sides``."""

    role: str
    label: str
    origin: str
    job: str
    run: str
    steps_source: str
    steps: tuple[int, ...]  # the step numbers read ((0,): the whole run)
    processes: int
    start_ns: int  # the steps read: first start, last end
    end_ns: int

    def document(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["steps"] = list(self.steps)
        doc["start"], doc["end"] = iso(self.start_ns), iso(self.end_ns)
        return doc


@dataclass(frozen=True)
class DiffReport:
    report: ViewReport
    sides: tuple[SideRead, SideRead]


def compare(
    base: Side,
    test: Side,
    steps: str = "all",
    kinds: Sequence[str] = ALL_KINDS,
    filters: Filters | None = None,
) -> DiffReport:
    unknown = [k for k in kinds if k not in ALL_KINDS]
    if unknown:
        raise AnalysisError(f"--kind: no kind {unknown[0]!r}; kinds are {', '.join(ALL_KINDS)}")
    found = (find_steps(base.catalog), find_steps(test.catalog))
    chosen = select_steps(steps, *found)
    totals: list[list[NameTotal]] = []
    reads: list[SideRead] = []
    damage: list[str] = []
    for side, side_steps, numbers in zip((base, test), found, chosen, strict=True):
        ranges = steps_sql(side_steps, numbers)
        step_query, unions_query = phase_queries(ranges, side_steps.whole)
        names_query = totals_query(ranges, side_steps.whole)
        queries = [step_query]
        if set(kinds) - {"phase"}:
            queries.append(names_query)
        if "phase" in kinds:
            queries.append(unions_query)
        read, found_rows = read_rows(side.catalog, *queries)
        got = dict(zip(queries, found_rows, strict=True))
        # Files left out (a damaged lake file): what the side does not count, and why.
        damage += [f"{side.role}: job {d.job}: {d.line()}" for d in read.damage]
        rows = name_totals(got[names_query]) if names_query in got else []
        if unions_query in got:
            rows += phase_totals(got[step_query], got[unions_query], side_steps.whole)
        totals.append([t for t in rows if t.kind in kinds])
        reads.append(_read(got[step_query], side, side_steps, numbers))
    rows_out = diff_rows(totals[0], totals[1], len(chosen[0]), len(chosen[1]))
    shown, fields = apply_filters(rows_out, DiffRow, NAME_FIELD, TIME_FIELD, filters or Filters())
    if not (filters and filters.select):
        fields = tuple(f for f in fields if f not in HIDDEN)
    notes = tuple(
        f"{r.role}: {r.origin}; {describe(s, r.steps)}" for r, s in zip(reads, found, strict=True)
    ) + tuple(damage)
    report = ViewReport(
        view="diff",
        jobs=(base.label, test.label),
        start_ns=reads[0].start_ns,
        end_ns=reads[0].end_ns,
        fields=fields,
        rows=shown,
        notes=notes,
    )
    return DiffReport(report, (reads[0], reads[1]))


def _read(
    step_rows: list[tuple[Any, ...]], side: Side, steps: Steps, numbers: tuple[int, ...]
) -> SideRead:
    start = min((int(r[2]) for r in step_rows), default=0)
    end = max((int(r[3]) for r in step_rows), default=0)
    if steps.whole and end:
        end -= 1  # the whole run's range ends one past the last record (diff_steps)
    return SideRead(
        side.role, side.label, side.origin, side.job, side.run, steps.source, numbers,
        steps.processes, start, end,
    )  # fmt: skip


class DiffJsonReporter:
    def __init__(self, diff: DiffReport) -> None:
        self.diff = diff

    def render(self, out: TextIO) -> None:
        r = self.diff.report
        doc = {
            "schema": SCHEMA,
            "view": r.view,
            "jobs": list(r.jobs),
            "window": r.window(),
            "fields": list(r.fields),
            "rows": r.records(),
            "notes": list(r.notes),
            "sides": [s.document() for s in self.diff.sides],
        }
        json.dump(doc, out, indent=1)
        out.write("\n")


def diff_reporter(fmt: str, diff: DiffReport) -> Reporter:
    if fmt == "json":
        return DiffJsonReporter(diff)
    if fmt == "csv":
        return CsvReporter(diff.report)
    return TableReporter(diff.report)
