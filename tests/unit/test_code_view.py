"""``summary --view code`` and ``--view lines``: GPU work attributed to the Python stacks
that launched it, read back from real Kineto traces recorded with_stack=True (TraceLens)
and from a small hand-made one whose answers are known, through the importer, the lake
and DuckDB as a user's command runs them; and tfprof's display rules on known trees."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.unit.stack_traces import BERT, TRACES, gpu_us, tiny_trace
from tfprof.collector.analysis.code_tree import (
    NO_STACK,
    Display,
    Leaf,
    build,
    fold,
    lines,
    shown,
    starts,
)
from tfprof.collector.cli import main as collector

QWEN = TRACES / "h100__Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
NORM = TRACES / "perf_model__normalization__normalization_layer_test.json.gz"
FRAMEWORK = r"torch/|nn\.Module: |<built-in"


def summary(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert collector(["summary", *args, "--format", "json"]) == 0
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


def test_bert_gpu_time_goes_to_its_python_lines(capsys: pytest.CaptureFixture[str]) -> None:
    doc = summary(capsys, str(BERT), "--view", "code")
    rows = doc["rows"]
    roots = [r for r in rows if r["depth"] == 1]
    # every kernel and copy of the trace was launched from Python: one root holds them all
    assert sum(r["total_us"] for r in roots) == pytest.approx(gpu_us(BERT), abs=0.01)
    assert [r["code"] for r in roots] == ["<string>:1:<module>"]
    assert roots[0]["kernels"] == 60 and roots[0]["launches"] == 61
    assert "61 of 61 records" in doc["notes"][0] and "61 exactly" in doc["notes"][0]
    # a node's total is its own time and its children's (depth first, children follow)
    for i, row in enumerate(rows):
        kids = []
        for later in rows[i + 1 :]:
            if later["depth"] <= row["depth"]:
                break
            if later["depth"] == row["depth"] + 1:
                kids.append(later["total_us"])
        assert row["total_us"] == pytest.approx(row["self_us"] + sum(kids), abs=0.01)
        if kids:  # siblings by total, largest first
            assert kids == sorted(kids, reverse=True)


def test_trimming_the_framework_leaves_the_model_lines(capsys: pytest.CaptureFixture[str]) -> None:
    doc = summary(capsys, str(BERT), "--view", "code", "--trim-name-regex", FRAMEWORK,
                  "--start-name-regex", "run_on_input", "--max-depth", "3")  # fmt: skip
    rows = doc["rows"]
    assert rows[0]["code"].endswith("text_base_model.py:28:run_on_input")
    assert rows[0]["depth"] == 1 and rows[0]["total_us"] == pytest.approx(gpu_us(BERT), abs=0.01)
    # BertLMHeadModel.forward, then BertModel.forward (the encoder) and the LM head
    assert rows[1]["code"] == "transformers/models/bert/modeling_bert.py:1306:forward"
    assert {r["code"] for r in rows if r["depth"] == 3} >= {
        "transformers/models/bert/modeling_bert.py:1001:forward",
        "transformers/models/bert/modeling_bert.py:797:forward",
    }
    assert max(r["depth"] for r in rows) == 3
    assert not any(re.search(FRAMEWORK, r["code"]) for r in rows)


def test_lines_self_times_add_up_to_the_gpu_time(capsys: pytest.CaptureFixture[str]) -> None:
    doc = summary(capsys, str(QWEN), "--view", "lines", "--trim-name-regex", FRAMEWORK)
    rows = {r["code"]: r for r in doc["rows"]}
    # each GPU record's time is its innermost line's own: once, whatever the recursion
    assert sum(r["self_us"] for r in rows.values()) == pytest.approx(gpu_us(QWEN), abs=0.1)
    # 509 records were launched before the profiler's window: no stack, and said so
    assert rows[NO_STACK]["launches"] == 509 and "509 with no launching call" in doc["notes"][0]
    rotary = rows["transformers/models/qwen2/modeling_qwen2.py:68:apply_rotary_pos_emb"]
    half = rows["transformers/models/qwen2/modeling_qwen2.py:61:rotate_half"]
    # rotate_half is called from apply_rotary_pos_emb: in its total, not its own time
    assert rotary["total_us"] == pytest.approx(rotary["self_us"] + half["total_us"], abs=0.01)
    first = doc["rows"][0]
    assert first["self_us"] == max(r["self_us"] for r in rows.values())


def test_gradient_work_goes_under_the_forward_line(capsys: pytest.CaptureFixture[str]) -> None:
    doc = summary(capsys, str(NORM), "--view", "lines", "--show-name-regex", "gradient")
    (grad,) = doc["rows"]
    assert grad["code"] == "<autograd>:(gradient)" and grad["kernels"] > 0
    tree = summary(capsys, str(NORM), "--view", "code", "--hide-name-regex", FRAMEWORK)["rows"]
    forward = next(r for r in tree if r["code"] == "test_perf_model.py:35:forward")
    assert forward["total_us"] > grad["total_us"]


def test_exact_nearest_and_missing_are_told_apart(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    trace = str(tiny_trace(tmp_path / "tiny.json"))
    doc = summary(capsys, trace, "--view", "code")
    rows = {r["code"]: r for r in doc["rows"]}
    main, step = rows["train.py:10:main"], rows["train.py:20:step"]
    assert (step["self_us"], step["nearest_pct"]) == (50.0, 0.0)  # captured at its launch
    # main's own: 30 us launched in it, 20 us after it through the capture 160 us before
    assert (main["self_us"], main["total_us"], main["kernels"]) == (50.0, 100.0, 3)
    assert main["nearest_pct"] == 20.0
    assert rows[NO_STACK]["total_us"] == 10.0
    (note,) = doc["notes"]
    assert "3 of 4 records" in note and "2 exactly" in note
    assert "1 by the nearest sample" in note and "160.0 µs before the call" in note
    assert "1 with no launching call recorded" in note
    # the window cuts: from 1.25 ms on only the last two kernels count
    late = summary(capsys, trace, "--view", "code", "--since", "+235us")
    assert {r["code"]: r["total_us"] for r in late["rows"]} == {
        "train.py:10:main": 20.0, NO_STACK: 10.0}  # fmt: skip


def test_code_options_are_refused_elsewhere(capsys: pytest.CaptureFixture[str]) -> None:
    assert collector(["summary", str(BERT), "--view", "kernels", "--trim-name-regex", "x"]) != 0
    assert "applies to the code, lines and memory --by code views" in capsys.readouterr().err


# tfprof's display rules on a known tree: a/b/c (6), a/b (1), a/d (3), e (2)
LEAVES = [Leaf(path, [ns, 1, 1, 0, 0, 0, 1])
          for path, ns in ((("a", "b", "c"), 6.0), (("a", "b"), 1.0), (("a", "d"), 3.0),
                           (("e",), 2.0))]  # fmt: skip


def names(display: Display, start: str | None = None) -> list[tuple[str, int]]:
    root = build(LEAVES)
    pattern = re.compile(start) if start else None
    return [(n.name, d) for n, d in shown(starts(root, pattern), display)]


def test_tree_display_rules() -> None:
    assert names(Display()) == [("a", 1), ("b", 2), ("c", 3), ("d", 2), ("e", 1)]
    assert names(Display(max_depth=2)) == [("a", 1), ("b", 2), ("d", 2), ("e", 1)]
    # min on totals: b (7) stays, d (3) and e (2) go
    assert names(Display(min_gpu_ns=4)) == [("a", 1), ("b", 2), ("c", 3)]
    # a hidden node's shown descendants move up to its nearest shown ancestor
    assert names(Display(hide=re.compile("^b$"))) == [("a", 1), ("c", 3), ("d", 2), ("e", 1)]
    assert names(Display(show=re.compile("^[ce]$"))) == [("c", 3), ("e", 1)]
    assert names(Display(), start="^[bd]$") == [("b", 1), ("c", 2), ("d", 1)]


def test_fold_and_lines() -> None:
    trim = re.compile("^b$")
    assert fold(("a", "b", "c"), trim) == ("a", "c")
    root = build(Leaf(fold(leaf.path, trim), leaf.values) for leaf in LEAVES)
    a = root.children["a"]
    assert set(a.children) == {"c", "d"} and a.own[0] == 1.0 and a.total[0] == 10.0
    # recursion: x calls itself; each stack counts once in x's total
    per = lines([Leaf(("x", "y", "x"), [5.0, 1, 1, 0, 0, 0, 1])], None, None)
    assert per["x"][1][0] == 5.0 and per["x"][0][0] == 5.0 and per["y"][0][0] == 0.0
    assert lines([Leaf(("x", "y"), [5.0, 1, 1, 0, 0, 0, 1])], None, 1)["x"] == (
        [0.0] * 7, [5.0, 1, 1, 0, 0, 0, 1])  # fmt: skip
