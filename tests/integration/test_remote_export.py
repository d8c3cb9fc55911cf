"""From another machine's point of view: a real ``tfprof-collector serve`` fed by real
agents, and the client commands run as processes in a working directory of their own,
given only the collector's gRPC address. ``export --collector`` writes the trace the
collector's own ``export --data-dir`` writes; ``capture -o`` writes the window's trace
without the data dir; ``top`` reads the same address."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.collector_proc import ServeProcess, start_serve
from tests.integration.conftest import agent_cmd, clean_env, collector_cmd, load_trace_file
from tests.integration.dense_replay import DENSE

pytestmark = pytest.mark.timeout(300)
KINETO = "kineto-hta/simple_add.json.gz"


def client(where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """A collector command run in ``where`` (a folder holding nothing of the collector's)."""
    return subprocess.run(
        collector_cmd(*args), cwd=where, env=clean_env(), capture_output=True, text=True,
        timeout=180,
    )  # fmt: skip


def kernel_rows(where: Path, *source: str) -> list[dict[str, object]]:
    done = client(where, "summary", *source, "--view", "kernels", "--format", "json")
    assert done.returncode == 0, done.stderr
    rows: list[dict[str, object]] = json.loads(done.stdout)["rows"]
    return rows


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[ServeProcess]:
    server = start_serve(tmp_path / "collector" / "data")
    yield server
    assert server.terminate() == 0, server.output()


def test_export_from_elsewhere_is_the_collectors_own_export(
    serve: ServeProcess, traces: Path, tmp_path: Path
) -> None:
    job = subprocess.run(
        agent_cmd("run", "--collector", serve.address, "--job", "train",
                  "--source", f"replay:{traces / KINETO}", "--replay-speed", "max",
                  "--host-metrics-interval", "0", "--", sys.executable, "-c", "pass"),
        env=clean_env(), capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert job.returncode == 0, job.stderr
    assert f"export --collector {serve.address} --job train" in job.stderr
    laptop = tmp_path / "laptop"
    laptop.mkdir()
    remote = client(laptop, "export", "--collector", serve.address, "--job", "train",
                    "-o", "train.pftrace")  # fmt: skip
    assert remote.returncode == 0, remote.stderr
    assert sorted(p.name for p in laptop.iterdir()) == ["train.pftrace"]
    data = tmp_path / "collector" / "data"
    local = client(tmp_path / "collector", "export", "--data-dir", str(data), "--job", "train",
                   "-o", "train.pftrace")  # fmt: skip
    assert local.returncode == 0, local.stderr
    assert remote.stderr.split(": ")[-1] == local.stderr.split(": ")[-1]  # "N slices"
    from_laptop = kernel_rows(laptop, "train.pftrace")
    assert from_laptop and from_laptop == kernel_rows(tmp_path / "collector", "train.pftrace")
    assert from_laptop == kernel_rows(laptop, "--data-dir", str(data))

    top = client(laptop, "top", "--collector", serve.address, "--once", "--format", "json",
                 "--interval", "200ms")  # fmt: skip
    assert top.returncode == 0, top.stderr
    (row,) = json.loads(top.stdout)["jobs"]
    assert row["kernels_total"] == sum(int(r["count"]) for r in from_laptop)  # type: ignore[call-overload]


def test_capture_o_from_elsewhere_writes_the_window(
    serve: ServeProcess, traces: Path, tmp_path: Path
) -> None:
    sentinel = tmp_path / "stop"
    code = f"import os, time\nwhile not os.path.exists({str(sentinel)!r}):\n    time.sleep(0.05)\n"
    job = subprocess.Popen(
        agent_cmd("run", "--collector", serve.address, "--job", "od", "--capture", "on-demand",
                  "--source", f"replay:{traces / DENSE}", "--replay-speed", "1",
                  "--replay-repeat", "400", "--exit-timeout", "4", "--host-metrics-interval",
                  "0", "--", sys.executable, "-c", code),
        env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    laptop = tmp_path / "laptop"
    laptop.mkdir()
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:  # until the job's stream is live
            listed = client(laptop, "capture", "--collector", serve.address, "--job", "od",
                            "--duration", "2s", "--start-in", "1s", "--flush-grace", "3s",
                            "-o", "window.json")  # fmt: skip
            if "no live stream" not in listed.stderr:
                break
            time.sleep(0.5)
        assert listed.returncode == 0, listed.stderr
    finally:
        sentinel.touch()
        job.communicate(timeout=120)
    assert sorted(p.name for p in laptop.iterdir()) == ["window.json"]
    trace = load_trace_file(laptop / "window.json")
    start, end = trace["otherData"]["window_ns"]
    assert end - start == 2 * 10**9
    slices = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    assert slices, "the window holds no record"
    assert all(t["records_outside_window"] == 0 for j in trace["otherData"]["jobs"]
               for t in j["tasks"])  # fmt: skip
