"""``export --format speedscope`` and ``--format collapsed``: GPU time by Python stack as
flame graphs, from a real Kineto trace with stacks (TraceLens) and from stored jobs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.unit.stack_traces import BERT, gpu_us, tiny_trace
from tfprof.collector.cli import main as collector


def export(*args: str) -> None:
    assert collector(["export", *args]) == 0


def test_speedscope_profile_weighs_stacks_by_gpu_time(tmp_path: Path) -> None:
    out = tmp_path / "bert.speedscope.json"
    export(str(BERT), "-o", str(out))
    doc: dict[str, Any] = json.loads(out.read_text())
    assert doc["$schema"] == "https://www.speedscope.app/file-format-schema.json"
    (profile,) = doc["profiles"]  # one job, one task, no host samples
    assert profile["type"] == "sampled" and profile["unit"] == "nanoseconds"
    assert profile["name"].endswith("task 0: GPU time")
    frames = doc["shared"]["frames"]
    assert len(profile["samples"]) == len(profile["weights"]) == len(set(map(tuple,
           profile["samples"])))  # fmt: skip
    assert sum(profile["weights"]) == profile["endValue"] == round(gpu_us(BERT) * 1000)
    assert all(0 <= i < len(frames) for s in profile["samples"] for i in s)
    named = {f["name"]: f for f in frames}
    forward = named["forward (transformers/models/bert/modeling_bert.py:1306)"]
    assert (forward["file"], forward["line"]) == ("transformers/models/bert/modeling_bert.py", 1306)
    # every stack starts at the process's outermost frame
    assert {frames[s[0]]["name"] for s in profile["samples"]} == {"<module> (<string>:1)"}


def test_collapsed_lines_add_up_per_job(tmp_path: Path) -> None:
    data = tmp_path / "data"
    assert collector(["import", "--data-dir", str(data), "--job", "bert", str(BERT)]) == 0
    tiny = tiny_trace(tmp_path / "tiny.json")
    assert collector(["import", "--data-dir", str(data), "--job", "tiny", str(tiny)]) == 0
    out = tmp_path / "both.folded"
    export("--data-dir", str(data), "-o", str(out))
    total: dict[str, int] = {}
    for line in out.read_text().splitlines():
        stack, _, ns = line.rpartition(" ")
        job, task, *frames = stack.split(";")
        assert task == "task 0" and frames
        total[job] = total.get(job, 0) + int(ns)
    assert total == {"bert": round(gpu_us(BERT) * 1000), "tiny": 110_000}
    assert "tiny;task 0;train.py:10:main;train.py:20:step 50000" in out.read_text()
    assert "tiny;task 0;(no Python stack) 10000" in out.read_text()
    # speedscope: a profile per job (and task)
    both = tmp_path / "both.json"
    export("--data-dir", str(data), "--job", "tiny", "--job", "bert", "--format", "speedscope",
           "-o", str(both))  # fmt: skip
    names = [p["name"] for p in json.loads(both.read_text())["profiles"]]
    assert names == ["bert task 0: GPU time", "tiny task 0: GPU time"]


def test_flame_formats_refuse_timeline_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = str(tmp_path / "x.collapsed")
    assert collector(["export", str(BERT), "-o", out, "--window", "0:1"]) != 0
    assert "--window does not apply to --format collapsed" in capsys.readouterr().err
