"""The whole path with real processes: launcher, hook, relay, gRPC, collector, export.

Each job runs the real TensorFlow example while the replay source feeds a real GPU
trace through the same path CUPTI records take.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import (
    EXAMPLE,
    Collector,
    agent_cmd,
    clean_env,
    collector_cmd,
    expected_tracks,
    gpu_tracks,
    load_trace_file,
    track_counts,
)

pytest.importorskip("tensorflow")
pytestmark = pytest.mark.tensorflow

TF_TRACE = "tf-timeline-ikhlestov/GPU_timeline_03_merged_5_runs.json"
KINETO_TRACE = "kineto-hta/event_sync_multi_stream.json.gz"


def traced_training(
    job: str, trace: Path, *extra: str, collector: str | None = None, exit_code: int = 0
) -> list[str]:
    args = ["--job", job, "--source", f"replay:{trace}", "--replay-speed", "max"]
    args += ["--host-metrics-interval", "200", *extra]
    if collector:
        args += ["--collector", collector]
    return agent_cmd(
        "run",
        *args,
        "--",
        sys.executable,
        str(EXAMPLE),
        "--steps",
        "30",
        "--exit-code",
        str(exit_code),
    )


def test_two_concurrent_jobs_merge_into_one_timeline(
    collector: Collector, traces: Path, tmp_path: Path
) -> None:
    tf_trace, kineto_trace = traces / TF_TRACE, traces / KINETO_TRACE
    env = clean_env()
    job_a = subprocess.Popen(
        traced_training("alpha", tf_trace, collector=collector.address),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    job_b = subprocess.Popen(
        traced_training("beta", kineto_trace, collector=collector.address, exit_code=3),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out_a, err_a = job_a.communicate(timeout=240)
    out_b, err_b = job_b.communicate(timeout=240)
    assert job_a.returncode == 0, err_a
    assert job_b.returncode == 3, err_b  # the job's own exit code, unchanged
    assert "done: 30 steps" in out_a and "done: 30 steps" in out_b

    out = tmp_path / "merged.json"
    export = subprocess.run(
        collector_cmd("export", "--data-dir", str(collector.data_dir), "-o", str(out)),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert export.returncode == 0, export.stderr
    trace = load_trace_file(out)
    slices, counters = track_counts(trace)

    assert gpu_tracks(slices, "alpha") == expected_tracks(tf_trace, "/job:alpha")
    assert gpu_tracks(slices, "beta") == expected_tracks(kineto_trace, "/job:beta")
    for job in ("alpha", "beta"):
        host = [n for n in counters if n.startswith(f"/job:{job}/task:") and n.endswith("/cpu")]
        assert host, f"no host counters for {job}"
    jobs = {j["name"]: j for j in trace["otherData"]["jobs"]}
    assert set(jobs) == {"alpha", "beta"}
    assert all(j["dropped"]["total"] == 0 for j in jobs.values())

    listing = subprocess.run(
        collector_cmd("jobs", "--data-dir", str(collector.data_dir)),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listing.returncode == 0
    assert "alpha" in listing.stdout and "beta" in listing.stdout

    by_gpu = tmp_path / "by_gpu.json.gz"
    export = subprocess.run(
        collector_cmd(
            "export", "--data-dir", str(collector.data_dir), "--group-by", "gpu", "-o", str(by_gpu)
        ),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert export.returncode == 0, export.stderr
    gpu_trace = load_trace_file(by_gpu)
    gpu_procs = {
        e["args"]["name"]
        for e in gpu_trace["traceEvents"]
        if e.get("ph") == "M" and e["name"] == "process_name" and "GPU-replay-" in e["args"]["name"]
    }
    # Both jobs replayed on one host: a device ordinal both traces use is one physical
    # GPU, so there are as many GPU processes as distinct ordinals, not one per job.
    from tfprof.readers import load_trace

    ordinals = {d for t in (tf_trace, kineto_trace) for d, _ in load_trace(t).per_stream_counts()}
    assert len(gpu_procs) == len(ordinals)
    assert sum(1 for e in gpu_trace["traceEvents"] if e.get("ph") == "X") == sum(slices.values())


def test_embedded_collector_writes_the_trace(traces: Path, tmp_path: Path) -> None:
    kineto_trace = traces / KINETO_TRACE
    out = tmp_path / "embedded.trace.json.gz"
    run = subprocess.run(
        traced_training("solo", kineto_trace, "-o", str(out)),
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr
    assert "done: 30 steps" in run.stdout
    assert f"trace written to {out}" in run.stderr
    assert "tfprof: job solo" in run.stderr  # the summary
    slices, counters = track_counts(load_trace_file(out))
    assert gpu_tracks(slices, "solo") == expected_tracks(kineto_trace, "/job:solo")
    assert any(n.endswith("/cpu") for n in counters)
