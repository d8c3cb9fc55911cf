"""TensorFlow op names from TensorFlow's own host tracer (tfprof.agent.inprocess.tf_ops), in a real
TensorFlow CPU process: the tracer is installed before ``import tensorflow`` as the hook
does, and the process reports what its sink received."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tfprof.core.records import RecordKind

pytest.importorskip("tensorflow")
pytestmark = pytest.mark.tensorflow

JOB = r"""
import json, os, sys, threading, time
from tfprof.agent.inprocess import tf_ops

class Sink:
    def __init__(self):
        self.strings, self.rows, self.warnings = [""], [], []
    def intern(self, s):
        self.strings.append(s)
        return len(self.strings) - 1
    def submit(self, table, wait=False):
        cols = [table.column(c) for c in ("kind", "start_ns", "duration_ns", "name", "thread",
                                          "category")]
        for k, s, d, n, t, c in zip(*cols):
            self.rows.append([k, s, d, self.strings[n], t, self.strings[c]])
        return True
    def add_devices(self, devices): pass
    def add_tracer_dropped(self, count): pass
    def warn(self, message): self.warnings.append(message)

sink = Sink()
tf_ops.install(sink)
t0 = time.time_ns()
import tensorflow as tf

@tf.function
def before(x):
    with tf.name_scope("blk"):
        return tf.matmul(x, x) + 1.0

@tf.function
def after(x):
    with tf.name_scope("after"):
        return tf.nn.relu(x)

x = tf.ones((64, 64))
for _ in range(3):
    before(x)
tf.matmul(x, x)  # an eager op, on this (the main) thread
tf.profiler.experimental.start(sys.argv[1])  # the user's own session: ours steps aside
before(x)
tf.profiler.experimental.stop()
after(x)  # ours is back
tids = sorted(int(t) for t in os.listdir("/proc/self/task"))
tf_ops.stop(time.monotonic() + 60)
t1 = time.time_ns()
first_warnings = list(sink.warnings)

# Someone else's session is running when TensorFlow is imported: one line, no tracer.
from tensorflow.python.profiler.internal import _pywrap_profiler
foreign = _pywrap_profiler.ProfilerSession()
foreign.start("", {"host_tracer_level": 1})
tf_ops._tracer = None
late = Sink()
tf_ops.install(late)
print(json.dumps({"t0": t0, "t1": t1, "pid": os.getpid(), "tids": tids, "rows": sink.rows,
                  "warnings": first_warnings, "late_warnings": late.warnings,
                  "late_tracer": tf_ops._tracer is not None}))
"""


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    user_logdir = tmp_path_factory.mktemp("user-profile")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TFPROF_")}
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    proc = subprocess.run(
        [sys.executable, "-c", JOB, str(user_logdir)],
        capture_output=True, text=True, timeout=240, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    data: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    data["user_files"] = [p.name for p in Path(user_logdir).rglob("*.xplane.pb")]
    return data


def test_graph_ops_are_marker_rows_named_scope_node_type(report: dict[str, Any]) -> None:
    names = {row[3] for row in report["rows"]}
    assert any(re.fullmatch(r"blk/MatMul:\w*MatMul", n) for n in names), names
    assert any(re.fullmatch(r"blk/add:\w*Add\w*", n) for n in names), names
    for kind, _, _, _, _, category in report["rows"]:
        assert kind == RecordKind.MARKER and category == "tf_op"


def test_eager_op_is_on_the_main_thread(report: dict[str, Any]) -> None:
    eager = [row for row in report["rows"] if row[3] == "MatMul"]
    assert eager and all(row[4] == report["pid"] for row in eager)


def test_threads_are_os_thread_ids_and_times_inside_the_run(report: dict[str, Any]) -> None:
    for _, start, duration, name, thread, _ in report["rows"]:
        assert thread in report["tids"], (name, thread)
        assert report["t0"] <= start and start + duration <= report["t1"], name
        assert duration >= 0
    graph_threads = {row[4] for row in report["rows"] if row[3].startswith("blk/")}
    assert graph_threads - {report["pid"]}, "graph ops ran on TensorFlow's own threads"


def test_the_users_profiler_runs_and_ours_resumes_after_it(report: dict[str, Any]) -> None:
    assert report["user_files"], "the user's tf.profiler session wrote its profile"
    assert any(row[3].startswith("after/") for row in report["rows"])
    assert report["warnings"] == []


def test_a_session_already_running_means_one_line_and_no_tracer(report: dict[str, Any]) -> None:
    assert not report["late_tracer"]
    assert len(report["late_warnings"]) == 1
    assert "TensorFlow's profiler is in use" in report["late_warnings"][0]
