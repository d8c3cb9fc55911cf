"""Reporters for findings: ``table`` (ranked text, for people) and ``json`` / ``csv``.

The text goes through the collector's one text renderer (collector/terminal.py): each
finding's title is bold on a terminal only, never with ``NO_COLOR``.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import textwrap
from collections.abc import Sequence
from typing import Any, TextIO

from tfprof.collector.advice.base import Finding
from tfprof.collector.analysis.errors import AnalysisError
from tfprof.collector.analysis.render import iso
from tfprof.collector.terminal import TextWriter

SCHEMA = "tfprof.advice/1"


def _record(f: Finding) -> dict[str, Any]:
    out = dataclasses.asdict(f)
    out["jobs"], out["streams"] = list(f.jobs), list(f.streams)
    out["start"], out["end"] = iso(f.start_ns), iso(f.end_ns)
    return out


class TextReporter:
    def __init__(self, findings: Sequence[Finding], colour: bool | None = None) -> None:
        self.findings = findings
        self.colour = colour

    def render(self, out: TextIO) -> None:
        text = TextWriter(out, self.colour)
        if not self.findings:
            text.line("no findings: no rule found anything worth reporting")
            return
        for rank, f in enumerate(self.findings, 1):
            text.line(f"{rank}. [{f.rule}] {f.title}", bold=True)
            seconds = (f.end_ns - f.start_ns) / 1e9
            text.line(
                f"   at stake: {f.impact_us:,.0f} us; window {iso(f.start_ns)} + {seconds:.6f} s"
            )
            if f.jobs:
                text.line(f"   jobs: {', '.join(f.jobs)}")
            if f.streams:
                text.line(f"   streams: {', '.join(f.streams)}")
            evidence = ", ".join(f"{k}={_short(v)}" for k, v in f.evidence.items())
            text.line(_paragraph("   evidence: ", evidence))
            text.line(_paragraph("   suggestion: ", f.suggestion))
            text.line()


def _paragraph(label: str, body: str) -> str:
    """``body`` after ``label``, filled to 100 columns, continued lines indented."""
    return textwrap.fill(body, 100, initial_indent=label, subsequent_indent="     ")


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".")
    if isinstance(value, (list, dict)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


class JsonReporter:
    def __init__(self, findings: Sequence[Finding]) -> None:
        self.findings = findings

    def render(self, out: TextIO) -> None:
        json.dump(
            {"schema": SCHEMA, "findings": [_record(f) for f in self.findings]}, out, indent=1
        )
        out.write("\n")


class CsvReporter:
    FIELDS = ("rule", "title", "impact_us", "start", "end", "jobs", "streams", "evidence",
              "suggestion")  # fmt: skip

    def __init__(self, findings: Sequence[Finding]) -> None:
        self.findings = findings

    def render(self, out: TextIO) -> None:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(self.FIELDS)
        for f in self.findings:
            rec = _record(f)
            writer.writerow(
                [
                    rec["rule"], rec["title"], rec["impact_us"], rec["start"], rec["end"],
                    ";".join(f.jobs), ";".join(f.streams),
                    json.dumps(rec["evidence"], separators=(",", ":")), rec["suggestion"],
                ]
            )  # fmt: skip


def reporter(fmt: str, findings: Sequence[Finding]) -> TextReporter | JsonReporter | CsvReporter:
    if fmt == "table":
        return TextReporter(findings)
    if fmt == "json":
        return JsonReporter(findings)
    if fmt == "csv":
        return CsvReporter(findings)
    raise AnalysisError(f"unknown format {fmt!r}; choose table, json or csv")
