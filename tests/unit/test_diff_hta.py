"""``diff`` against HolisticTraceAnalysis 0.5.0's ``TraceDiff.compare_traces`` on HTA's
own trace-diff pairs (tests/data/traces/hta-trace-diff: its unit test's pair, and a
control / test pair of a real 8-rank and 2-rank job).

HTA groups every event of a step by full name across categories; ``diff`` splits them
into kinds (kernel, copy, sync, api, op), so per name the kinds' counts add up to HTA's.
Both run on the same files, HTA in the test: at HTA's default (each side's first
ProfilerStep: ``--steps first``) and over every step both sides have (``--steps shared``).
These traces have whole-µs times, where HTA's rounding changes nothing: total durations
are compared exactly too.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from tests.traces import shared_traces
from tfprof.collector.cli import main

hta_trace_diff = pytest.importorskip("hta.trace_diff")

PAIRS = {
    "trace_compare": ("trace_compare/base", "trace_compare/test"),
    "trace_diff": ("trace_diff/control", "trace_diff/test"),
}
RAW_KINDS = "kernel,copy,sync,api,op"  # every record once (collective and phase derive)
Figures = dict[str, tuple[int, int, float, float]]  # name -> counts and totals (µs)


@pytest.fixture(scope="module", params=sorted(PAIRS))
def pair(request: pytest.FixtureRequest) -> tuple[str, Path, Path, Any, Any]:
    root = shared_traces() / "hta-trace-diff"
    base, test = (root / d for d in PAIRS[request.param])
    logging.getLogger("hta").setLevel(logging.ERROR)
    control = hta_trace_diff.LabeledTrace(label="control", trace_dir=str(base))
    treated = hta_trace_diff.LabeledTrace(label="test", trace_dir=str(test))
    return request.param, base, test, control, treated


def hta_figures(frame: Any) -> Figures:
    return {
        str(name): (
            int(row["control_counts"]),
            int(row["test_counts"]),
            float(row["control_total_duration"]),
            float(row["test_total_duration"]),
        )
        for name, row in frame.iterrows()
    }


def diff_figures(base: Path, test: Path, steps: str, tmp_path: Path) -> Figures:
    (file,) = base.iterdir()
    (other,) = test.iterdir()
    out = tmp_path / f"diff-{steps}.json"
    argv = ["diff", str(file), str(other), "--steps", steps, "--kind", RAW_KINDS]
    assert main([*argv, "--format", "json", "-o", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["schema"] == "tfprof.summary/1" and doc["view"] == "diff"
    assert [s["steps_source"] for s in doc["sides"]] == ["ProfilerStep ranges"] * 2
    sums: dict[str, list[float]] = defaultdict(lambda: [0, 0, 0.0, 0.0])
    for row in doc["rows"]:
        figures = sums[row["name"]]
        figures[0] += row["base_count"]
        figures[1] += row["test_count"]
        figures[2] += row["base_total_us"]
        figures[3] += row["test_total_us"]
    return {n: (int(a), int(b), round(c, 3), round(d, 3)) for n, (a, b, c, d) in sums.items()}


def assert_same(ours: Figures, theirs: Figures) -> None:
    assert set(ours) == set(theirs), set(ours) ^ set(theirs)
    counts = {n for n in theirs if ours[n][:2] != theirs[n][:2]}
    assert not counts, [(n, ours[n], theirs[n]) for n in sorted(counts)[:5]]
    totals = {n for n in theirs if ours[n][2:] != theirs[n][2:]}
    assert not totals, [(n, ours[n], theirs[n]) for n in sorted(totals)[:5]]


def test_first_step_equals_trace_diff_default(pair: Any, tmp_path: Path) -> None:
    """HTA's default: first rank, each side's first ProfilerStep, CPU and GPU events."""
    name, base, test, control, treated = pair
    theirs = hta_figures(hta_trace_diff.TraceDiff.compare_traces(control, treated))
    ours = diff_figures(base, test, "first", tmp_path)
    assert_same(ours, theirs)
    # Not a vacuous agreement: HTA's counts_change_categories (=, +, -) on the real pair.
    if name == "trace_diff":
        assert len(theirs) == 432
        assert sum(1 for a, b, _, _ in theirs.values() if b > a) == 67
        assert sum(1 for a, b, _, _ in theirs.values() if b < a) == 203
        assert sum(1 for a, b, _, _ in theirs.values() if a and not b) == 138


def test_shared_steps_equal_trace_diff_over_those_steps(pair: Any, tmp_path: Path) -> None:
    _, base, test, control, treated = pair
    shared = sorted(set(control.iterations()) & set(treated.iterations()))
    assert len(shared) >= 2
    frame = hta_trace_diff.TraceDiff.compare_traces(
        control, treated, control_iteration=shared, test_iteration=shared
    )
    assert_same(diff_figures(base, test, "shared", tmp_path), hta_figures(frame))
