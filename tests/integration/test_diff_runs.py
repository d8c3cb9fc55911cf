"""``diff`` on two real runs: a real launcher and collector, a traced Python process that
replays a real 2-rank DDP trace (NCCL all-reduce, ``ProfilerStep#4-6``) twice in one
job, the second run with ``--replay-stretch 1.3``. Every kernel's time per step grows
30 % (its count stays), and so does the step."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tfprof.collector.cli import main
from tfprof.collector.store import Store

from .conftest import Collector, agent_cmd, clean_env

pytestmark = pytest.mark.timeout(300)

OF2 = "kineto-hta-dist/nccl_allreduce_rank0_of2.json.gz"
JOB = "replaydiff"


def replay(address: str, trace: Path, *options: str) -> None:
    proc = subprocess.run(
        agent_cmd("run", "--collector", address, "--job", JOB, "--source", f"replay:{trace}",
                  "--replay-speed", "max", *options, "--",
                  sys.executable, "-c", "import time; time.sleep(0.5)"),
        env=clean_env(), capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr


def test_a_stretched_replay_grows_every_kernel_by_30_percent(
    traces: Path, collector: Collector, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    replay(collector.address, traces / OF2)
    replay(collector.address, traces / OF2, "--replay-stretch", "1.3")
    runs = {
        job.run_id: min(int(s.records["start_ns"].min()) + s.record_shift_ns for s in job.streams)
        for job in Store(collector.data_dir).load_jobs([JOB])
    }
    assert len(runs) == 2
    base_run, test_run = sorted(runs, key=runs.__getitem__)  # in the order they ran
    data_dir = str(collector.data_dir)

    # A job with two runs: the side must say which.
    assert main(["diff", "--data-dir", data_dir, JOB, f"{JOB}/{test_run}"]) != 0
    assert f"{JOB}/RUN" in capsys.readouterr().err

    out = tmp_path / "diff.json"
    argv = ["diff", "--data-dir", data_dir, f"{JOB}/{base_run}", f"{JOB}/{test_run}"]
    assert main([*argv, "--format", "json", "-o", str(out)]) == 0
    doc = json.loads(out.read_text())
    for side, run in zip(doc["sides"], (base_run, test_run), strict=True):
        assert side["run"] == run
        assert side["steps_source"] == "ProfilerStep ranges"
        assert side["steps"] == [4, 5, 6]
    rows = doc["rows"]
    kernels = [r for r in rows if r["kind"] == "kernel"]
    assert len(kernels) > 20
    for r in kernels:
        assert r["change"] == "=" and r["base_count"] == r["test_count"] > 0, r
        assert 29.5 < r["delta_pct"] < 30.5, r
    collectives = {r["name"]: r for r in rows if r["kind"] == "collective"}
    assert set(collectives) == {"allreduce", "broadcast"}
    assert all(29.5 < r["delta_pct"] < 30.5 for r in collectives.values())
    (step,) = (r for r in rows if r["kind"] == "phase" and r["name"] == "step")
    assert step["base_count"] == step["test_count"] == 3
    assert 29.5 < step["delta_pct"] < 30.5
    # Ranked by the change of time per step, largest first.
    changes = [r["delta_per_step_us"] for r in rows]
    assert [abs(c) for c in changes] == sorted((abs(c) for c in changes), reverse=True)

    # The table says where each side's steps came from.
    assert main([*argv, "--kind", "kernel", "--top", "5"]) == 0
    table = capsys.readouterr().out
    assert "base: job replaydiff run " in table and "ProfilerStep ranges, 3 of 3 read" in table


def test_a_keras_fit_is_read_by_its_step_records(
    traces: Path, collector: Collector, tmp_path: Path
) -> None:
    """A real Keras fit (TensorFlow CPU) marks its steps with no code change (STEP
    records) while a replay of a trace without ProfilerSteps feeds GPU records: the diff
    reads the STEP records, and GPU work by the step its replayed call launched it in."""
    example = Path(__file__).resolve().parents[2] / "examples" / "train_mnist_like.py"
    proc = subprocess.run(
        agent_cmd("run", "--collector", collector.address, "--job", "fit", "--source",
                  f"replay:{traces / 'kineto-hta/event_sync_multi_stream.json.gz'}",
                  "--replay-speed", "1", "--replay-repeat", "20000", "--exit-timeout", "4",
                  "--", sys.executable, str(example), "--fit", "--steps", "8"),
        env=clean_env(), capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "fit.json"
    argv = ["diff", "--data-dir", str(collector.data_dir), "fit", "fit", "--steps", "1-7"]
    assert main([*argv, "--format", "json", "-o", str(out)]) == 0
    doc = json.loads(out.read_text())
    for side in doc["sides"]:
        assert side["steps_source"] == "STEP records"
        assert side["steps"] == [1, 2, 3, 4, 5, 6, 7]
    rows = {(r["kind"], r["name"]): r for r in doc["rows"]}
    assert rows[("phase", "step")]["base_count"] == 7
    kernels = [r for r in doc["rows"] if r["kind"] == "kernel"]
    assert kernels and all(r["base_count"] > 0 and r["change"] == "=" for r in kernels)
    assert all(r["delta_per_step_us"] == 0 for r in doc["rows"])
