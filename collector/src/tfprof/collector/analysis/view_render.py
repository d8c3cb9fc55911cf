"""Reporters for views: one ``render(outfile)`` each, chosen by ``--format``.

``table`` is for people (aligned columns by the collector's one text renderer,
collector/terminal.py: bold header only on a terminal and never with ``NO_COLOR``),
``json`` and ``csv`` for scripts. JSON field names are the row dataclasses' field
names, documented in docs/guides/summaries-and-advice.md.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TextIO

from tfprof.collector.terminal import TextWriter
from tfprof.collector.terminal import use_colour as use_colour  # its old home, re-exported

FORMATS = ("table", "json", "csv")
SCHEMA = "tfprof.summary/1"


def iso(ns: int) -> str:
    """Collector-clock nanoseconds as ISO-8601 UTC with microseconds."""
    t = datetime.datetime.fromtimestamp(ns / 1e9, tz=datetime.timezone.utc)
    return t.isoformat(timespec="microseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class ViewReport:
    view: str
    jobs: tuple[str, ...]
    start_ns: int
    end_ns: int
    fields: tuple[str, ...]
    rows: Sequence[Any]  # the view's row dataclasses
    notes: tuple[str, ...] = ()  # what the records lack and why (analysis/notes.py)
    # A tree view's name field: a table indents it by the row's ``depth`` (JSON and CSV
    # keep the name and the depth apart).
    indent: str = ""

    def window(self) -> dict[str, Any]:
        return {
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "start": iso(self.start_ns),
            "end": iso(self.end_ns),
            "duration_us": round((self.end_ns - self.start_ns) / 1000, 3),
        }

    def records(self) -> list[dict[str, Any]]:
        return [{f: _plain(getattr(row, f)) for f in self.fields} for row in self.rows]


def _plain(value: Any) -> Any:
    if isinstance(value, list):
        return [
            dataclasses.asdict(v) if dataclasses.is_dataclass(v) and not isinstance(v, type) else v
            for v in value
        ]
    return value


# Time columns (µs) and byte columns are shown in one unit per column, the one that
# suits the column's largest value; JSON and CSV keep the fields' own units.
_TIME_UNITS: tuple[tuple[float, str], ...] = ((1e6, "s"), (1e3, "ms"), (1.0, "µs"))
_BYTE_UNITS: tuple[tuple[float, str], ...] = (
    (2**30, "GiB"),
    (2**20, "MiB"),
    (2**10, "KiB"),
    (1, "B"),
)
# Where the spread columns go in a table: nsys stats' order (mean, median, min, max, stddev).
_AFTER = {"median_us": "avg_us", "stddev_us": "max_us"}


def display_order(fields: Sequence[str]) -> list[str]:
    shown = [f for f in fields if not (f in _AFTER and _AFTER[f] in fields)]
    for field, after in _AFTER.items():
        if field in fields and after in fields:
            shown.insert(shown.index(after) + 1, field)
    return shown


def column(name: str, values: Sequence[Any]) -> tuple[str, list[str]]:
    """A table column: its header (with the unit chosen) and its cells."""
    numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    units = None
    if name.endswith("_us"):
        units, base = _TIME_UNITS, name.removesuffix("_us")
    elif name.endswith("_bytes"):
        units, base = _BYTE_UNITS, name.removesuffix("_bytes")
    if units is None or len(numbers) != len(values):
        header = name.removesuffix("_pct").upper() + (" %" if name.endswith("_pct") else "")
        return header, [cell(name, v) for v in values]
    top = max((abs(float(v)) for v in numbers), default=0.0)
    size, unit = next(((size, unit) for size, unit in units if top >= size), units[-1])
    digits = {"B": 0, "µs": 1}.get(unit, 2)
    return f"{base.upper()} ({unit})", [f"{float(v) / size:,.{digits}f}" for v in numbers]


# Widest text cell of a table: C++ template kernel names run to thousands of characters and
# would pad every row to their width. json and csv keep the whole text.
MAX_TEXT_CELL = 100


def cell(name: str, value: Any) -> str:
    if value is None:  # a figure that does not exist (diff's change % of a new name)
        return "-"
    if isinstance(value, str) and len(value) > MAX_TEXT_CELL:
        return value[: MAX_TEXT_CELL - 3] + "..."
    if isinstance(value, list):
        return "; ".join(str(v) for v in value) or "-"
    if isinstance(value, float):
        return f"{value:,.2f}" if name.endswith("pct") else f"{value:,.3f}"
    if isinstance(value, int) and not isinstance(value, bool) and name not in ("pid", "stream"):
        return f"{value:,}"
    return str(value)


class Reporter(Protocol):
    def render(self, out: TextIO) -> None: ...


class TableReporter:
    def __init__(self, report: ViewReport, colour: bool | None = None) -> None:
        self.report = report
        self.colour = colour

    def render(self, out: TextIO) -> None:
        r = self.report
        text = TextWriter(out, self.colour)
        text.line(
            f"{r.view}: {len(r.rows)} row(s); jobs {', '.join(r.jobs) or '-'}; "
            f"window {window_text(r.start_ns, r.end_ns)}"
        )
        for note in r.notes:
            text.line(note, bold=True)
        fields = display_order(r.fields)
        columns = [column(f, [_value(r, row, f) for row in r.rows]) for f in fields]
        body = [[cells[i] for _, cells in columns] for i in range(len(r.rows))]
        # A column of numbers only is right-aligned (so is its header).
        numeric = [bool(body) and all(_numeric(row[i]) for row in body) for i in range(len(fields))]
        text.table([header for header, _ in columns], body, numeric)


def _value(report: ViewReport, row: Any, name: str) -> Any:
    value = getattr(row, name)
    if name == report.indent:
        return "  " * (getattr(row, "depth", 1) - 1) + str(value)
    return value


def window_text(start_ns: int, end_ns: int) -> str:
    """The analysis window for people; a run that recorded nothing has none (not 1970)."""
    if start_ns == 0 and end_ns == 0:
        return "none (nothing was recorded)"
    return f"{iso(start_ns)} + {seconds_text((end_ns - start_ns) / 1e9)}"


def seconds_text(seconds: float) -> str:
    """A duration in the unit that reads best: 850 µs, 12.5 ms, 3.20 s, 2 min 5 s."""
    if seconds >= 120:
        return f"{int(seconds // 60)} min {seconds % 60:.0f} s"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} µs"


def _numeric(text: str) -> bool:
    return text.replace(",", "").replace(".", "", 1).lstrip("-").isdigit()


class JsonReporter:
    def __init__(self, report: ViewReport) -> None:
        self.report = report

    def render(self, out: TextIO) -> None:
        r = self.report
        doc = {
            "schema": SCHEMA,
            "view": r.view,
            "jobs": list(r.jobs),
            "window": r.window(),
            "fields": list(r.fields),
            "rows": r.records(),
            "notes": list(r.notes),
        }
        json.dump(doc, out, indent=1)
        out.write("\n")


class CsvReporter:
    """One header line of field names; list fields (gaps, job shares) as JSON text."""

    def __init__(self, report: ViewReport) -> None:
        self.report = report

    def render(self, out: TextIO) -> None:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(self.report.fields)
        for rec in self.report.records():
            writer.writerow(
                json.dumps(v, separators=(",", ":")) if isinstance(v, list) else v
                for v in rec.values()
            )


def reporter(fmt: str, report: ViewReport) -> Reporter:
    if fmt == "table":
        return TableReporter(report)
    if fmt == "json":
        return JsonReporter(report)
    if fmt == "csv":
        return CsvReporter(report)
    from tfprof.collector.errors import AnalysisError

    raise AnalysisError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
