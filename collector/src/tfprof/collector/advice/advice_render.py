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
from tfprof.collector.analysis.view_render import iso, seconds_text
from tfprof.collector.errors import AnalysisError
from tfprof.collector.terminal import TextWriter

SCHEMA = "tfprof.advice/1"


# Evidence keys holding an absolute time (collector-clock ns), e.g. ``longest_idle_at_ns``.
_ABSOLUTE = "_at_ns"


def _offset_s(ns: int, origin_ns: int) -> float:
    return round((ns - origin_ns) / 1e9, 6)


def _record(f: Finding, origin_ns: int) -> dict[str, Any]:
    """A finding as JSON data: absolute times as they are, plus offsets (s) from the
    analysis window's start, also for absolute times in the evidence."""
    out = dataclasses.asdict(f)
    out["jobs"], out["streams"] = list(f.jobs), list(f.streams)
    out["start"], out["end"] = iso(f.start_ns), iso(f.end_ns)
    out["start_offset_s"] = _offset_s(f.start_ns, origin_ns)
    out["end_offset_s"] = _offset_s(f.end_ns, origin_ns)
    for key, value in f.evidence.items():
        if key.endswith(_ABSOLUTE) and isinstance(value, int):
            out["evidence"][key.removesuffix("_ns") + "_offset_s"] = _offset_s(value, origin_ns)
    return out


def _origin(findings: Sequence[Finding], origin_ns: int | None) -> int:
    if origin_ns is not None:
        return origin_ns
    return min((f.start_ns for f in findings), default=0)


class TextReporter:
    """``origin_ns``: the analysis window's start, which times are shown relative to."""

    def __init__(
        self,
        findings: Sequence[Finding],
        colour: bool | None = None,
        origin_ns: int | None = None,
        notes: Sequence[str] = (),
    ) -> None:
        self.findings = findings
        self.colour = colour
        self.origin_ns = _origin(findings, origin_ns)
        self.notes = notes

    def _at(self, ns: int) -> str:
        return f"+{seconds_text(max(0, ns - self.origin_ns) / 1e9)}"

    def render(self, out: TextIO) -> None:
        text = TextWriter(out, self.colour)
        for note in self.notes:
            text.line(note, bold=True)
        if not self.findings:
            text.line("no findings: no rule found anything worth reporting")
            return
        for rank, f in enumerate(self.findings, 1):
            text.line(f"{rank}. [{f.rule}] {f.title}", bold=True)
            text.line(
                f"   at stake: {seconds_text(f.impact_us / 1e6)}; window {self._at(f.start_ns)}"
                f" to {self._at(f.end_ns)} ({seconds_text((f.end_ns - f.start_ns) / 1e9)})"
            )
            if f.jobs:
                text.line(f"   jobs: {', '.join(f.jobs)}")
            if f.streams:
                text.line(f"   streams: {', '.join(f.streams)}")
            evidence = ", ".join(
                f"{k.removesuffix('_ns')}={self._at(v)}"
                if k.endswith(_ABSOLUTE) and isinstance(v, int)
                else f"{k}={_short(v)}"
                for k, v in f.evidence.items()
            )
            text.line(_paragraph("   evidence: ", evidence))
            text.line(_paragraph("   suggestion: ", f.suggestion))
            text.line()
        text.line(
            f"times (+...) are offsets from the analysis window's start, {iso(self.origin_ns)}"
        )


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
    def __init__(
        self, findings: Sequence[Finding], origin_ns: int | None = None, notes: Sequence[str] = ()
    ) -> None:
        self.findings = findings
        self.origin_ns = _origin(findings, origin_ns)
        self.notes = notes

    def render(self, out: TextIO) -> None:
        doc = {
            "schema": SCHEMA,
            "findings": [_record(f, self.origin_ns) for f in self.findings],
            "window_start_ns": self.origin_ns,
            "notes": list(self.notes),
        }
        json.dump(doc, out, indent=1)
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
            rec = _record(f, 0)
            writer.writerow(
                [
                    rec["rule"], rec["title"], rec["impact_us"], rec["start"], rec["end"],
                    ";".join(f.jobs), ";".join(f.streams),
                    json.dumps(rec["evidence"], separators=(",", ":")), rec["suggestion"],
                ]
            )  # fmt: skip


def reporter(
    fmt: str,
    findings: Sequence[Finding],
    origin_ns: int | None = None,
    notes: Sequence[str] = (),
) -> TextReporter | JsonReporter | CsvReporter:
    if fmt == "table":
        return TextReporter(findings, origin_ns=origin_ns, notes=notes)
    if fmt == "json":
        return JsonReporter(findings, origin_ns, notes)
    if fmt == "csv":
        return CsvReporter(findings)
    raise AnalysisError(f"unknown format {fmt!r}; choose table, json or csv")
