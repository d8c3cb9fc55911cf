"""``top --once --format json`` against a real collector fed by real agent streams: its
totals equal what the store holds, computed here independently from the stored records
(kernel count, copies, and busy seconds as GPU busy time everywhere: the union of each
process's kernel, copy and memset intervals on the GPU)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from tests.integration.collector_proc import start_serve
from tests.integration.conftest import agent_cmd, clean_env, collector_cmd
from tests.unit.live_records import brute_force_union
from tfprof.collector.store import Store
from tfprof.proto import collector_pb2 as pb

pytestmark = pytest.mark.timeout(240)

JOBS = {
    "multi-stream": "kineto-hta/event_sync_multi_stream.json.gz",
    "timeline": "tf-timeline-ikhlestov/GPU_timeline_03_merged_5_runs.json",
}


def replay(collector: str, job: str, trace: Path) -> subprocess.Popen[str]:
    cmd = agent_cmd(
        "run", "--collector", collector, "--job", job,
        "--source", f"replay:{trace}", "--replay-speed", "max", "--replay-repeat", "3",
        "--host-metrics-interval", "0", "--exit-timeout", "60",
        "--", sys.executable, "-c", "print('job done')",
    )  # fmt: skip
    return subprocess.Popen(
        cmd, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def stored_figures(data_dir: Path, job: str) -> dict[str, dict[str, float]]:
    """Per GPU name: kernels, busy seconds, copies and copied bytes of the stored records."""
    out: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    (run,) = Store(data_dir).load_jobs([job])
    for stream in run.streams:
        r = stream.records
        intervals: dict[int, list[tuple[int, int]]] = defaultdict(list)
        for kind, start, dur, device, nbytes in zip(
            r["kind"].tolist(), r["start_ns"].tolist(), r["duration_ns"].tolist(),
            r["device"].tolist(), r["bytes"].tolist(), strict=True,
        ):  # fmt: skip
            gpu = out[stream.device_uuid(device)]
            if kind == pb.KERNEL:
                gpu["kernels"] += 1
            elif kind == pb.MEMCPY:
                gpu["copies"] += 1
                gpu["copy_bytes"] += nbytes
            if kind in (pb.KERNEL, pb.MEMCPY, pb.MEMSET):
                intervals[device].append((start, start + dur))
        for device, spans in intervals.items():
            out[stream.device_uuid(device)]["busy_seconds"] += brute_force_union(spans) / 1e9
    return out


def test_top_once_json_matches_the_records_ingested(traces: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    serve = start_serve(data, "--metrics-listen", "127.0.0.1:0")
    try:
        assert serve.metrics_url is not None, serve.output()
        metrics = serve.metrics_url.removeprefix("http://").removesuffix("/metrics")
        jobs = [replay(serve.address, job, traces / trace) for job, trace in JOBS.items()]
        for proc in jobs:
            out, err = proc.communicate(timeout=180)
            assert proc.returncode == 0, err
            assert "job done" in out
        views = []
        # The gRPC address every command takes, and the Prometheus endpoint Grafana reads.
        for source in (["--collector", serve.address], ["--metrics-url", metrics]):
            top = subprocess.run(
                collector_cmd("top", *source, "--once", "--format", "json",
                              "--interval", "200ms"),
                capture_output=True, text=True, env=clean_env(), timeout=60,
            )  # fmt: skip
            assert top.returncode == 0, top.stderr
            views.append(json.loads(top.stdout))
    finally:
        assert serve.terminate() == 0

    view, scraped = views
    for figures in (view, scraped):  # rates differ with the moment; the totals may not
        figures.pop("collector"), figures.pop("interval_s")
        for row in (*figures["jobs"], *figures["gpus"]):
            for key in [k for k in row if k.endswith("_per_s") or k == "busy_percent"]:
                row.pop(key)
            for share in row.get("jobs", ()):
                share.pop("busy_percent"), share.pop("share_percent")
    assert view == scraped

    by_job = {j["job"]: j for j in view["jobs"]}
    assert set(by_job) == set(JOBS)
    for job in JOBS:
        want = stored_figures(data, job)
        row = by_job[job]
        assert row["kernels_total"] == sum(g["kernels"] for g in want.values()) > 0
        assert row["copies_total"] == sum(g["copies"] for g in want.values())
        assert row["copy_bytes_total"] == sum(g["copy_bytes"] for g in want.values())
        busy = sum(g["busy_seconds"] for g in want.values())
        assert row["busy_seconds_total"] == pytest.approx(busy, rel=1e-9)
        assert row["processes"] == 0  # the job ended: its stream closed
        assert row["dropped_total"] == 0
        assert sorted(row["gpus"]) == sorted(u for u, g in want.items() if g["kernels"])
        # Per GPU, this job's part of it.
        for gpu in view["gpus"]:
            share = next((s for s in gpu["jobs"] if s["job"] == job), None)
            if share is None:
                assert not want.get(gpu["gpu_uuid"], {}).get("kernels")
                continue
            assert share["kernels_total"] == want[gpu["gpu_uuid"]]["kernels"]
            expected = want[gpu["gpu_uuid"]]["busy_seconds"]
            assert share["busy_seconds_total"] == pytest.approx(expected, rel=1e-9)
    # Replays on one host name the same device (GPU-replay-<host>-0): one GPU, shared.
    (gpu,) = view["gpus"]
    assert sorted(s["job"] for s in gpu["jobs"]) == sorted(JOBS)
    assert np.isclose(
        sum(g["busy_seconds_total"] for g in view["gpus"]),
        sum(j["busy_seconds_total"] for j in view["jobs"]),
    )
