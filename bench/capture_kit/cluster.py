"""The simulated cluster of capture_alignment.py: one collector, a node daemon per
simulated host with its own clock skew (and, as root, host name), and on-demand traced
processes replaying a trace at speed 1."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path


def agent(*args: str) -> list[str]:
    return [sys.executable, "-m", "tfprof.agent.cli", *args]


def collector(*args: str) -> list[str]:
    return [sys.executable, "-m", "tfprof.collector.cli", *args]


def env_with(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TFPROF_")}
    env.update(extra)
    return env


def can_name_hosts() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "--uts", "sh", "-c", "hostname tfprof-probe"], capture_output=True, timeout=30
    )
    return probe.returncode == 0


def wait_line(proc: subprocess.Popen[str], marker: str, timeout: float = 120) -> str:
    """The first line of ``proc``'s stdout containing ``marker``."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if marker in line:
            return line
        if not line and proc.poll() is not None:
            break
    raise SystemExit(f"no {marker!r} from {proc.args!r}")


class Bench:
    def __init__(self, args: argparse.Namespace, tmp: Path) -> None:
        self.args = args
        self.tmp = tmp
        self.data = tmp / "data"
        self.sentinel = tmp / "stop"
        self.procs: list[subprocess.Popen[str]] = []  # the collector, then the daemons
        self.ranks: list[subprocess.Popen[bytes]] = []
        self.address = ""
        self.skews = [round(float(s) * 1e9) for s in args.skews.split(",")]

    def skew_of(self, rank: int) -> int:
        return self.skews[rank % len(self.skews)]

    def start_collector(self) -> None:
        proc = subprocess.Popen(
            collector("serve", "--listen", "127.0.0.1:0", "--data-dir", str(self.data),
                      "--log-level", "WARNING"),
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env_with(),
        )  # fmt: skip
        self.procs.append(proc)
        self.address = wait_line(proc, "listening on ").split()[-1]

    def start_host(self, index: int, skew_ns: int, named: bool) -> Path:
        """A node daemon for simulated host ``index``; its socket."""
        folder = self.tmp / f"h{index}"
        folder.mkdir()
        sock = folder / "agent.sock"
        cmd = agent("daemon", "--collector", self.address, "--socket", str(sock), "--spool-dir",
                    str(folder / "spool"), "--host-metrics-interval", "0")  # fmt: skip
        if named:
            script = f'hostname sim-host-{index} && exec "$@"'
            cmd = ["unshare", "--uts", "sh", "-c", script, "sh", *cmd]
        proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            env=env_with(TFPROF_TEST_CLOCK_SKEW_NS=str(skew_ns)),
        )  # fmt: skip
        self.procs.append(proc)
        assert proc.stderr is not None
        deadline = time.monotonic() + 120
        while "daemon listening on" not in proc.stderr.readline():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"daemon {index} did not start")
        return sock

    def start_rank(self, sock: Path, rank: int, skew_ns: int, named: bool, index: int) -> None:
        exports = subprocess.run(
            agent("env", "--socket", str(sock), "--job", "aligned", "--format", "json"),
            capture_output=True, text=True, timeout=60, check=True, env=env_with(),
        )  # fmt: skip
        env = env_with(**json.loads(exports.stdout))
        env.update(
            TFPROF_SOURCE=f"replay:{self.args.trace}", TFPROF_REPLAY_SPEED="1",
            TFPROF_REPLAY_REPEAT=str(self.args.repeat), TFPROF_EXIT_TIMEOUT="3",
            TFPROF_TEST_CLOCK_SKEW_NS=str(skew_ns),
            RANK=str(rank),
        )  # fmt: skip
        code = (
            "import os, time\n"
            f"while not os.path.exists({str(self.sentinel)!r}):\n"
            "    time.sleep(0.05)\n"
        )
        cmd = [sys.executable, "-c", code]
        if named:
            cmd = ["unshare", "--uts", "sh", "-c", f'hostname sim-host-{index} && exec "$@"',
                   "sh", *cmd]  # fmt: skip
        self.ranks.append(
            subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        )

    def logs(self) -> list[Path]:
        return sorted(self.data.glob("jobs/*/*/*/batches.log"))

    def wait_streams(self, n: int) -> None:
        deadline = time.monotonic() + 180
        while len(self.logs()) < n:
            if time.monotonic() > deadline:
                raise SystemExit(f"only {len(self.logs())} of {n} streams reached the collector")
            time.sleep(0.2)

    def stop(self) -> None:
        """Ranks first (through the sentinel), then the daemons, then the collector."""
        self.sentinel.touch()
        for rank in self.ranks:
            try:
                rank.wait(30)
            except subprocess.TimeoutExpired:
                rank.kill()
                rank.wait()
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
