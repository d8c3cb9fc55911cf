"""``tfprof-agent run --tf-ops on``: a real TensorFlow CPU job's op names reach the trace.

The example job (a Keras CNN in a ``tf.function``) runs under the real launcher with the
embedded collector; the Chrome trace it writes must hold the job's TensorFlow ops as host
ranges (MARKER records) named as TF's timeline names them, inside the job's run.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from .conftest import EXAMPLE, agent_cmd, clean_env, load_trace_file

pytest.importorskip("tensorflow")
pytestmark = pytest.mark.tensorflow

# Keras names its layers' ops sequential_N/conv2d_N/...; the type after the colon is
# what oneDNN builds rewrite it to (Conv2D or _MklNativeFusedConv2D, MatMul or _MklMatMul).
CONV = re.compile(r"sequential(_\d+)?/conv2d(_\d+)*/.*:\w*Conv2D\w*")
MATMUL = re.compile(r"(gradient_tape/)?sequential(_\d+)?/dense(_\d+)*/.*:\w*MatMul\w*")
SLACK_NS = 50_000_000  # clock-offset estimate of the embedded collector, generously


def _run(tmp_path: Path, switch: str) -> tuple[dict[str, Any], int, int, str]:
    out = tmp_path / f"{switch}.json"
    job = f"tfops-{switch}"
    before = time.time_ns()
    proc = subprocess.run(
        agent_cmd(
            "run", "--job", job, "--source", "none", "--tf-ops", switch,
            "--host-metrics-interval", "0", "-o", str(out), "--",
            sys.executable, str(EXAMPLE), "--steps", "8",
        ),
        env=clean_env(), capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    after = time.time_ns()
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "done: 8 steps" in proc.stdout
    said = [line for line in proc.stderr.splitlines() if line.startswith("tfprof:")]
    assert not [line for line in said if "TensorFlow" in line], said
    return load_trace_file(out), before, after, job


def _op_slices(trace: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        e
        for e in trace["traceEvents"]
        if e.get("ph") == "X" and e.get("cat") == "tf_op"  # the ranges' own category
    ]


def test_op_names_of_a_tensorflow_job_reach_the_trace(tmp_path: Path) -> None:
    trace, before, after, job = _run(tmp_path, "on")
    ops = _op_slices(trace)
    names = Counter(e["name"] for e in ops)
    assert any(CONV.fullmatch(n) for n in names), names.most_common(20)
    assert any(MATMUL.fullmatch(n) for n in names), names.most_common(20)
    # Every step runs the same graph: each conv op is there once per step.
    assert all(n >= 8 for name, n in names.items() if CONV.fullmatch(name))
    origin = trace["otherData"]["origin_ns"]
    for e in ops:
        start = origin + round(e["ts"] * 1000)
        assert before - SLACK_NS <= start <= start + round(e["dur"] * 1000) <= after + SLACK_NS
    process = {
        e["pid"]: e["args"]["name"]
        for e in trace["traceEvents"]
        if e.get("ph") == "M" and e.get("name") == "process_name"
    }
    assert {process[e["pid"]].split("/task:")[0] for e in ops} == {f"/job:{job}"}


def test_switched_off_no_op_names(tmp_path: Path) -> None:
    trace, _, _, _ = _run(tmp_path, "off")
    assert _op_slices(trace) == []
