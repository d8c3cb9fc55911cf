"""A shared node for issue 23's tests: a real collector, a real node daemon whose socket
every user reaches, and jobs run as a second local user with only `tfprof-agent env`'s
environment (and a replay source: no GPU here)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.integration.conftest import agent_cmd, clean_env
from tests.integration.daemon_proc import Daemon, watched
from tests.integration.local_users import SYSTEM_PYTHON, User
from tfprof.collector.store.catalog import JobInfo, list_runs
from tfprof.readers import load_trace

TRACE = "tf-timeline-ikhlestov/GPU_timeline_03_merged_5_runs.json"


@dataclass
class Node:
    folder: Path  # 0755: every user reaches the socket and the bootstrap in it
    trace: Path  # a copy every user can read
    records_per_replay: int

    @property
    def socket(self) -> Path:
        return self.folder / "agent.sock"

    def start_daemon(self, collector: str, *flags: str, nofile: int | None = None) -> Daemon:
        argv = agent_cmd(
            "daemon", "--collector", collector, "--socket", str(self.socket),
            "--spool-dir", str(self.folder / "spool"), "--host-metrics-interval", "0", *flags,
        )  # fmt: skip

        def limits() -> None:
            if nofile is not None:
                import resource

                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        proc = subprocess.Popen(
            argv, env=clean_env(TFPROF_LOG_LEVEL="WARNING"), stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True, preexec_fn=limits,
        )  # fmt: skip
        return watched(proc)

    def job_env(self, job: str, repeat: int = 1, **extra: str) -> dict[str, str]:
        out = subprocess.run(
            agent_cmd("env", "--socket", str(self.socket), "--job", job, "--capture", "always",
                      "--format", "json"),
            env=clean_env(), capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        env: dict[str, str] = json.loads(out.stdout)
        env.update(
            PATH="/usr/bin:/bin", HOME="/nonexistent", TFPROF_SOURCE=f"replay:{self.trace}",
            TFPROF_REPLAY_SPEED="max", TFPROF_REPLAY_REPEAT=str(repeat),
            TFPROF_EXIT_TIMEOUT="20", PYTHONUNBUFFERED="1", TMPDIR=str(self.folder / "tmp"),
        )  # fmt: skip
        env.update(extra)
        return env

    def run_as(
        self, user: User | None, env: dict[str, str], code: str, *args: str
    ) -> subprocess.Popen[str]:
        """``python3 -c code`` traced through the daemon, as ``user`` (None: root)."""
        argv = [SYSTEM_PYTHON, "-c", code, *args]
        full = user.argv(argv, env) if user is not None else argv
        return subprocess.Popen(
            full, env=None if user is not None else env, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, start_new_session=True,
        )  # fmt: skip


def make_node(traces: Path) -> Iterator[Node]:
    folder = Path(tempfile.mkdtemp(prefix="tfn-"))  # short: a socket path has 108 bytes
    try:
        folder.chmod(0o755)
        (folder / "tmp").mkdir(mode=0o1777)
        (folder / "tmp").chmod(0o1777)
        trace = folder / "trace.json"
        shutil.copy(traces / TRACE, trace)
        trace.chmod(0o644)
        yield Node(folder, trace, len(load_trace(trace)))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def runs(data: Path, job: str) -> list[JobInfo]:
    return [i for i in list_runs(data / "jobs") if i.name == job]


def wait_records(data: Path, job: str, count: int, timeout: float = 60) -> int:
    """The records stored for ``job`` once ``count`` are (or what is there at the bound)."""
    deadline = time.monotonic() + timeout
    while True:
        stored = sum(i.records for i in runs(data, job))
        if stored >= count or time.monotonic() > deadline:
            return stored
        time.sleep(0.2)


def finish(proc: subprocess.Popen[str], timeout: float = 120) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        return proc.communicate()
