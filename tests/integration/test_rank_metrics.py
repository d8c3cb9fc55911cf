"""Per-rank live figures end to end: two ranks of a real DDP trace replayed by real
processes under one ``tfprof-agent run`` into ``serve``, rank 1 at
``TFPROF_REPLAY_STRETCH=1.3``; the collector's periodic read of the job's last minutes
names rank 1 in ``top`` (gRPC and Prometheus doors) with the step time its ranks view
gives."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.collector_proc import start_serve
from tests.integration.conftest import agent_cmd, clean_env, collector_cmd

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[2]
TRACE = REPO / "tests/data/traces/kineto-hta-dist/nccl_allreduce_rank0_of2.json.gz"


def _top(*source: str) -> dict[str, Any]:
    done = subprocess.run(collector_cmd("top", *source, "--once", "--format", "json"),
                          env=clean_env(), capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    (job,) = [j for j in json.loads(done.stdout)["jobs"] if j["job"] == "ddp"]
    return dict(job)


def test_top_names_the_stretched_rank(tmp_path: Path) -> None:
    serve = start_serve(tmp_path / "data", "--metrics-listen", "127.0.0.1:0",
                        "--rank-figures-interval", "1")  # fmt: skip
    try:
        assert serve.metrics_url is not None, serve.output()
        script = ("RANK=0 \"$PY\" -c 'import time; time.sleep(1)' & "
                  "TFPROF_REPLAY_STRETCH=1.3 RANK=1 \"$PY\" -c 'import time; time.sleep(1)' & "
                  "wait")  # fmt: skip
        done = subprocess.run(
            agent_cmd("run", "--collector", serve.address, "--job", "ddp",
                      "--source", f"replay:{TRACE}", "--replay-speed", "max",
                      "--host-metrics-interval", "0", "--", "bash", "-c", script),
            env=clean_env(PY=sys.executable), capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        deadline = time.monotonic() + 60
        job = _top("--collector", serve.address)
        while job["slowest_rank"] is None and time.monotonic() < deadline:
            time.sleep(1)
            job = _top("--collector", serve.address)
        assert job["slowest_rank"] == "1", serve.output()
        metrics = serve.metrics_url.removeprefix("http://").removesuffix("/metrics")
        assert _top("--metrics-url", metrics)["slowest_rank"] == "1"
        ranks = subprocess.run(
            collector_cmd("summary", "--data-dir", str(tmp_path / "data"), "--job", "ddp",
                          "--view", "ranks", "--format", "json"),
            env=clean_env(), capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert ranks.returncode == 0, ranks.stderr
        slowest = max(r["step_p50_us"] for r in json.loads(ranks.stdout)["rows"])
        assert job["step_seconds"] == pytest.approx(slowest / 1e6, abs=1e-6)
        assert job["slowest_skew_seconds"] > 0
    finally:
        serve.terminate()
