"""Jobs under on-demand capture: their code, captures started and listed through the CLI,
waiting for their streams, and finishing them."""

from __future__ import annotations

import json
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tfprof.collector.store import Store

from .conftest import clean_env, collector_cmd

MS = 10**6
S = 10**9


# Replay long enough to outlast every step; the job ends on a sentinel file and cuts the
# rest short at exit (records outside every window are never traced anyway).
REPEAT = "400"  # ~57 s of replayed GPU activity


@dataclass
class Window:
    start_ns: int  # on the collector's clock
    end_ns: int

    def holds(self, times: np.ndarray) -> np.ndarray:
        return (times >= self.start_ns) & (times < self.end_ns)


def job_code(sentinel: Path) -> str:
    return f"import os, time\nwhile not os.path.exists({str(sentinel)!r}):\n    time.sleep(0.05)\n"


def wait_for_streams(data: Path, jobs: set[str], timeout: float = 90) -> None:
    """Until every job in ``jobs`` has a stream stored (its hello went through)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = {j.name for j in Store(data).load_jobs() if j.streams}
        if jobs <= seen:
            return
        time.sleep(0.2)
    raise AssertionError(f"no stream of {sorted(jobs - seen)} reached the collector")


def capture(address: str, *args: str) -> tuple[str, Window]:
    """Run ``tfprof-collector capture``; (its output, the window it opened)."""
    done = subprocess.run(
        collector_cmd("capture", "--collector", address, *args),
        env=clean_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    capture_id = re.match(r"capture (\S+):", done.stdout)
    assert capture_id, done.stdout
    listing = list_captures(address)
    (record,) = [c for c in listing if c["capture_id"] == capture_id.group(1)]
    start = int(record["start_ns"])
    return done.stdout, Window(start, start + int(record["duration_ns"]))


def list_captures(address: str) -> list[dict[str, Any]]:
    done = subprocess.run(
        collector_cmd("captures", "--collector", address, "--format", "json"),
        env=clean_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    listing: list[dict[str, Any]] = json.loads(done.stdout)
    return listing


def finish(jobs: dict[str, subprocess.Popen[str]], sentinel: Path) -> dict[str, str]:
    """End every job through the sentinel; their stderr."""
    sentinel.touch()
    errors = {}
    for name, proc in jobs.items():
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, f"{name}: {err}"
        errors[name] = err
    return errors
