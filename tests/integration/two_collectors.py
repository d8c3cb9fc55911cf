"""One lake written by two real collectors at once: the runs the lake tests replay into
them (job "train" has a run on each collector), and the writing itself."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.integration.collector_proc import start_serve
from tests.integration.conftest import agent_cmd, clean_env
from tests.traces import shared_traces

# (job, trace) per collector.
RUNS = {
    "a": [("train", "kineto-hta/simple_add.json.gz")],
    "b": [("train", "kineto-hta/event_sync_multi_stream.json.gz"),
          ("eval", "tf-timeline-ikhlestov/GPU_timeline_02_step_0.json")],
}  # fmt: skip


def write_lake(root: Path, lake: str, env: dict[str, str] | None = None) -> dict[str, Path]:
    """Start a ``serve --lake LAKE`` per collector of ``RUNS`` (each its own data dir
    under ``root``), replay its runs into it at full speed and stop it; the data dirs."""
    traces = shared_traces()
    data_dirs = {name: root / f"data-{name}" for name in RUNS}
    serves = {
        name: start_serve(d, "--lake", lake, "--compact-interval", "1", env=env)
        for name, d in data_dirs.items()
    }
    try:
        for name, jobs in RUNS.items():
            for job, trace in jobs:
                cmd = agent_cmd(
                    "run", "--collector", serves[name].address, "--job", job,
                    "--source", f"replay:{traces / trace}", "--replay-speed", "max",
                    "--host-metrics-interval", "0", "--", sys.executable, "-c", "pass",
                )  # fmt: skip
                run = subprocess.run(cmd, env=clean_env(), capture_output=True, text=True,
                                     timeout=300, cwd=root)  # fmt: skip
                assert run.returncode == 0, run.stderr
    finally:
        for serve in serves.values():
            assert serve.terminate() == 0, serve.output()
    return data_dirs
