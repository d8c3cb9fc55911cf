"""Jobs run under tfprof-agent run and the processes their trace holds."""

from __future__ import annotations

import subprocess
from pathlib import Path

from .conftest import agent_cmd, clean_env, load_trace_file


def run_agent(
    tmp_path: Path, *args: str, timeout: float = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        agent_cmd("run", *args),
        env=env or clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=tmp_path,
    )


def traced_pids(trace_path: Path) -> set[int]:
    trace = load_trace_file(trace_path)
    return {t["pid"] for job in trace["otherData"]["jobs"] for t in job["tasks"]}
