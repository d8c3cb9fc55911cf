"""``summary --view memory --by code``: the device memory live at each job's peak, by
the Python line that allocated it (docs/guides/code-view.md, "Memory by line").

A job's level is the running sum of its allocations less its releases (CUPTI MEMORY2,
all its processes and GPUs); at the moment it is highest, the allocations not yet
released are attributed as launches are: each MEMORY2 record carries the correlation id
of the CUDA call that allocated it, whose thread and time find the nearest stack sample
(code_sql.py). With PyTorch's caching allocator these are the allocator's segments, so
a line is the one that grew the cache, not every tensor it made.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import duckdb

from tfprof.collector.analysis import code_sql
from tfprof.collector.analysis.code_read import Attribution, by_group, read
from tfprof.collector.analysis.code_sql import Scope
from tfprof.collector.analysis.code_tree import BYTES, NEAR_NS, RECORDS, Leaf, lines
from tfprof.collector.analysis.code_view import HIDDEN, CodeFilters, folded
from tfprof.collector.analysis.filters import Filters, apply_filters
from tfprof.collector.analysis.units import pct
from tfprof.collector.analysis.view_render import ViewReport, iso
from tfprof.collector.errors import AnalysisError


@dataclass(frozen=True)
class MemoryLineRow:
    job: str
    code: str  # file:line:function
    self_bytes: int  # live at the peak, allocated with this line innermost
    total_bytes: int  # live at the peak, allocated under it
    allocations: int  # live allocations under it
    peak_pct: float  # self_bytes of the job's peak
    nearest_pct: float  # of total_bytes, attributed through the nearest sample
    file: str
    line: int
    function: str


@dataclass(frozen=True)
class Peak:
    job: str
    peak_bytes: int
    peak_ns: int
    live: int  # allocations live then


def memory_by_code(
    con: duckdb.DuckDBPyConnection, scope: Scope, filters: Filters, code: CodeFilters
) -> ViewReport:
    if filters.min_micros is not None:
        raise AnalysisError("--min-micros: the memory view has no time field")
    con.execute(f"CREATE OR REPLACE TEMP TABLE code_live AS {code_sql.live_at_peak(scope)}")
    peaks = [
        Peak(job, int(peak or 0), int(when or 0), int(live))
        for job, peak, when, live in con.execute(
            "SELECT job, any_value(peak), any_value(peak_ns), count(*) FROM code_live "
            "GROUP BY job ORDER BY job"
        ).fetchall()
    ]
    att = read(con, scope, records="SELECT * FROM code_live")
    rows = _rows(att, {p.job: p for p in peaks}, code, filters.max_depth)
    out, fields = apply_filters(
        rows,
        MemoryLineRow,
        "code",
        "",
        Filters(
            order_by=filters.order_by,
            select=filters.select,
            show_name_regex=filters.show_name_regex,
            hide_name_regex=filters.hide_name_regex,
            top=filters.top,
        ),
    )
    if not filters.select:
        fields = tuple(f for f in fields if f not in HIDDEN)
    return ViewReport(
        view="memory",
        jobs=tuple(p.job for p in peaks),
        start_ns=min((p.peak_ns for p in peaks), default=0),
        end_ns=max((p.peak_ns for p in peaks), default=0),
        fields=fields,
        rows=out,
        notes=_notes(att, peaks),
    )


def _rows(
    att: Attribution, peaks: dict[str, Peak], code: CodeFilters, max_depth: int | None
) -> list[MemoryLineRow]:
    start = re.compile(code.start_name_regex) if code.start_name_regex else None
    trimmed = Attribution(leaves=folded(att, code), groups=att.groups, frames=att.frames)
    rows = []
    for (job, _task), leaves in _by_job(trimmed):
        peak = peaks[job].peak_bytes if job in peaks else 0
        for name, (own, total) in lines(leaves, start, max_depth).items():
            file, line, function = att.frames.get(name, ("", 0, name))
            rows.append(
                MemoryLineRow(
                    job=job,
                    code=name,
                    self_bytes=int(own[BYTES]),
                    total_bytes=int(total[BYTES]),
                    allocations=int(total[RECORDS]),
                    peak_pct=pct(own[BYTES], peak),
                    nearest_pct=pct(total[NEAR_NS], total[BYTES]),
                    file=file,
                    line=line,
                    function=function,
                )
            )
    rows.sort(key=lambda r: (r.job, -r.self_bytes, -r.total_bytes, r.code))
    return rows


def _by_job(att: Attribution) -> list[tuple[tuple[str, str], list[Leaf]]]:
    """The leaves of each job (its tasks together: the peak is the job's)."""
    jobs: dict[str, list[Leaf]] = {}
    for (job, _task), leaves in by_group(att):
        jobs.setdefault(job, []).extend(leaves)
    return [((job, ""), leaves) for job, leaves in jobs.items()]


def _notes(att: Attribution, peaks: list[Peak]) -> tuple[str, ...]:
    if not peaks:
        return ("no device memory records: the trace has none, or --memory was off",)
    notes = [
        f"job {p.job}: peak {p.peak_bytes:,} bytes at {iso(p.peak_ns)}, {p.live:,} "
        f"allocation(s) live then"
        for p in peaks
    ]
    how = att.how
    got = [c for h, c in how.items() if h in (code_sql.EXACT, code_sql.NEAREST)]
    total = sum(c.records for c in how.values())
    if total:
        share = pct(sum(c.bytes for c in got), sum(c.bytes for c in how.values()))
        text = (
            f"allocations by stack: {sum(c.records for c in got):,} of {total:,} live at "
            f"the peaks ({share:.1f} % of the bytes)"
        )
        missing = how.get(code_sql.NO_CALL)
        if missing and missing.records:
            text += f"; {missing.records:,} with no allocating call recorded (--api off, or "
            text += "a Kineto trace: its memory events carry no correlation id)"
        notes.append(text)
    return tuple(notes)
