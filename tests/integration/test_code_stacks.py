"""Python stacks end to end with real processes: a job under ``tfprof-agent run`` replays
a real Kineto trace recorded with Python stacks (TraceLens, H100) while the hook samples
the job's own threads; the relay, gRPC and the collector store both in the lake, and
``sql`` reads them back: launch captures resolve to the model's Python lines and join
the kernels they launched, samples to the job's own lines."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from tests.integration.conftest import Collector, agent_cmd, clean_env, collector_cmd

TRACE = (
    Path(__file__).resolve().parents[1]
    / "data/traces/tracelens/h100__gaunernst_bert-small-uncased__1016001.json.gz"
)
JOB = textwrap.dedent(
    """
    import time

    def spin(seconds):
        end = time.thread_time() + seconds
        while time.thread_time() < end:
            pass

    def data_loading():
        spin(0.01)

    def train_step():
        spin(0.03)

    for _ in range(40):
        data_loading()
        train_step()
    """
)


def run_job(collector: Collector, tmp_path: Path, job: str, *flags: str) -> Path:
    script = tmp_path / "secret_project" / "train.py"
    script.parent.mkdir(exist_ok=True)
    script.write_text(JOB)
    done = subprocess.run(
        agent_cmd("run", "--collector", collector.address, "--job", job, "--source",
                  f"replay:{TRACE}", "--replay-speed", "max", "--replay-repeat", "2", *flags,
                  "--", sys.executable, str(script)),
        env=clean_env(), capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return script


def sql(collector: Collector, query: str) -> list[dict[str, Any]]:
    done = subprocess.run(
        collector_cmd("sql", "--data-dir", str(collector.data_dir), "--format", "json", query),
        env=clean_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows: list[dict[str, Any]] = json.loads(done.stdout)
    return rows


def test_launch_captures_and_samples_reach_the_lake(collector: Collector, tmp_path: Path) -> None:
    script = run_job(collector, tmp_path, "bert")
    launches = sql(collector, """
        SELECT s.correlation, st.file, st.function, k.name AS kernel
        FROM stack_samples s
        JOIN stacks st USING (stream_id, stack_id)
        LEFT JOIN kernels k ON k.stream_id = s.stream_id AND k.correlation = s.correlation
        WHERE s.kind = 2""")  # fmt: skip
    # the trace's 61 launches (60 kernels, a copy), twice, each with its own correlation
    assert len(launches) == 122 and len({r["correlation"] for r in launches}) == 122
    assert sum(1 for r in launches if r["kernel"]) == 120
    # their stacks are the model's: a launch under BertSelfAttention's forward, say
    paths = sql(collector, """
        WITH RECURSIVE up AS (
          SELECT s.correlation, st.stack_id, st.parent_id, st.file, st.function
          FROM stack_samples s JOIN stacks st USING (stream_id, stack_id) WHERE s.kind = 2
          UNION ALL
          SELECT up.correlation, p.stack_id, p.parent_id, p.file, p.function
          FROM up JOIN stacks p ON p.stack_id = up.parent_id)
        SELECT correlation, list(file) AS files FROM up GROUP BY correlation""")  # fmt: skip
    with_model = [r for r in paths
                  if "transformers/models/bert/modeling_bert.py" in r["files"]]  # fmt: skip
    assert len(with_model) >= 100
    assert all(any(f.endswith("text_base_model.py") for f in r["files"]) for r in paths)

    # the job's own thread, sampled: spin() under train_step takes 3/4 of the time
    leaves = sql(collector, """
        SELECT p.file, p.line, p.function AS caller, count(*) AS n
        FROM stack_samples s JOIN stacks st USING (stream_id, stack_id)
        JOIN stacks p ON p.stream_id = st.stream_id AND p.stack_id = st.parent_id
        WHERE s.kind = 1 AND st.function = 'spin' GROUP BY ALL""")  # fmt: skip
    callers = {r["caller"]: r for r in leaves}
    assert set(callers) == {"data_loading", "train_step"}
    source = script.read_text().splitlines()
    for function, call in (("train_step", "spin(0.03)"), ("data_loading", "spin(0.01)")):
        assert callers[function]["file"] == str(script)
        assert call in source[callers[function]["line"] - 1]  # the line that was running
    n = {f: r["n"] for f, r in callers.items()}
    share = n["train_step"] / (n["train_step"] + n["data_loading"])
    assert 0.6 < share < 0.9, n
    (bye,) = sql(collector, "SELECT dropped_stack_samples FROM goodbyes")
    assert bye["dropped_stack_samples"] == 0


def test_code_off_sends_no_stack(collector: Collector, tmp_path: Path) -> None:
    run_job(collector, tmp_path, "quiet", "--code", "off")
    assert sql(collector, "SELECT count(*) AS n FROM stacks") == [{"n": 0}]
    assert sql(collector, "SELECT count(*) AS n FROM kernels") == [{"n": 120}]


def test_redacted_paths_never_reach_the_collector(collector: Collector, tmp_path: Path) -> None:
    run_job(collector, tmp_path, "private", "--redact", "SECRET_project,modeling_bert")
    files = {r["file"] for r in sql(collector, "SELECT DISTINCT file FROM stacks")}
    assert "<redacted>" in files
    assert not any("secret_project" in f.lower() or "modeling_bert" in f for f in files)
    functions = {r["function"] for r in sql(collector, "SELECT DISTINCT function FROM stacks")}
    assert {"train_step", "data_loading"} <= functions  # functions stay, files go
    # nor anywhere in the stored log: the frames left the process redacted
    logs = list(collector.data_dir.rglob("batches.log"))
    assert logs and not any(b"secret_project" in p.read_bytes() for p in logs)
