"""Fixtures that start the real launcher, the real collector and real Python processes."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.traces import shared_traces

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "train_mnist_like.py"


@pytest.fixture(scope="session")
def traces() -> Path:
    return shared_traces()


def agent_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "tfprof.agent.cli", *args]


def collector_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "tfprof.collector.cli", *args]


# Launchers started by tests spool here, never in the user's ~/.cache; removed at the
# end of the session (remove_test_spool).
SPOOL = tempfile.mkdtemp(prefix="tfprof-test-spool-")


@pytest.fixture(scope="session", autouse=True)
def remove_test_spool() -> Iterator[None]:
    yield
    shutil.rmtree(SPOOL, ignore_errors=True)


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TFPROF_")}
    env["TFPROF_SPOOL_DIR"] = SPOOL
    env["PYTHONUNBUFFERED"] = "1"
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    env.update(extra)
    return env


@dataclass
class Collector:
    address: str
    data_dir: Path
    proc: subprocess.Popen[str]

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                return self.proc.wait()
        return self.proc.returncode


def start_collector(data_dir: Path, listen: str = "127.0.0.1:0") -> Collector:
    proc = subprocess.Popen(
        collector_cmd("serve", "--listen", listen, "--data-dir", str(data_dir)),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=clean_env(),
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith("listening on "):
            return Collector(line.split()[-1], data_dir, proc)
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise RuntimeError("collector did not report its address")


@pytest.fixture
def collector(tmp_path: Path) -> Iterator[Collector]:
    c = start_collector(tmp_path / "collector-data")
    yield c
    assert c.stop() == 0, "collector did not exit cleanly on SIGTERM"


def load_trace_file(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        data: dict[str, Any] = json.load(f)
    return data


def track_counts(trace: dict[str, Any]) -> tuple[Counter[str], Counter[str]]:
    """Slices and counter samples per trace process name (or per thread name when the
    thread carries the pseudo-device, as with --group-by gpu)."""
    names = {}
    for e in trace["traceEvents"]:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            names[e["pid"]] = e["args"]["name"]
    slices: Counter[str] = Counter()
    counters: Counter[str] = Counter()
    for e in trace["traceEvents"]:
        if e.get("ph") == "X":
            slices[names[e["pid"]]] += 1
        elif e.get("ph") == "C":
            counters[names[e["pid"]]] += 1
    return slices, counters


def expected_tracks(trace_file: Path, prefix: str) -> Counter[str]:
    """Slices per pseudo-device that replaying ``trace_file`` must produce, from the
    importer's own per-stream counts (themselves tested against the raw files)."""
    from tfprof.core.tracks import TrackKey
    from tfprof.readers import load_trace

    recorded = load_trace(trace_file)
    expected: Counter[str] = Counter()
    for (device, stream), kinds in recorded.per_stream_counts().items():
        total = kinds["kernel"] + kinds["memcpy"] + kinds["memset"] + kinds.get("sync", 0)
        if total:
            label = TrackKey.for_stream("", "", device, stream).stream_label  # "none" too
            expected[f"{prefix}/gpu:{device}/stream:{label}"] += total
        if kinds["memcpy"]:
            expected[f"{prefix}/gpu:{device}/memcpy"] += kinds["memcpy"]
    return expected


def gpu_tracks(slices: Counter[str], job: str) -> Counter[str]:
    """Per pseudo-device counts of one job with the task part removed."""
    out: Counter[str] = Counter()
    for name, n in slices.items():
        if name.startswith(f"/job:{job}/task:") and "/gpu:" in name:
            out[f"/job:{job}" + name[name.index("/gpu:") :]] += n
    return out
