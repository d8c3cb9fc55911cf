"""Reporters for views: one ``render(outfile)`` each, chosen by ``--format``.

``table`` is for people (aligned columns by the collector's one text renderer,
collector/terminal.py: bold header only on a terminal and never with ``NO_COLOR``),
``json`` and ``csv`` for scripts. JSON field names are the row dataclasses' field
names, documented in README.md ("Summaries and advice").
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


def cell(name: str, value: Any) -> str:
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
        seconds = (r.end_ns - r.start_ns) / 1e9
        text.line(
            f"{r.view}: {len(r.rows)} row(s); jobs {', '.join(r.jobs) or '-'}; "
            f"window {iso(r.start_ns)} + {seconds:,.6f} s"
        )
        body = [[cell(f, getattr(row, f)) for f in r.fields] for row in r.rows]
        # A column of numbers only is right-aligned (so is its header).
        numeric = [
            bool(body) and all(_numeric(row[i]) for row in body) for i in range(len(r.fields))
        ]
        text.table([f.upper() for f in r.fields], body, numeric)


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
    from tfprof.collector.analysis.errors import AnalysisError

    raise AnalysisError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
