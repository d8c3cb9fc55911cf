"""A node daemon as a real process, started on a short socket folder."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .conftest import Collector, agent_cmd, clean_env


@dataclass
class Daemon:
    proc: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """Its exit code after ``sig``; killed (a negative code) if it has not gone in 60 s."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                return self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait()

    def output(self) -> str:
        return "".join(self.lines)

    def wait_for(self, text: str, timeout: float = 60.0) -> bool:
        """Wait until the daemon has said ``text`` (its stderr is read as it comes)."""
        deadline = time.monotonic() + timeout
        while text not in self.output() and time.monotonic() < deadline:
            time.sleep(0.05)
        return text in self.output()


def start_daemon(collector: Collector, node: Path, **env: str) -> Daemon:
    """A node daemon on ``node``'s socket; ``env``: extra variables for its environment."""
    cmd = agent_cmd(
        "daemon", "--collector", collector.address, "--socket", str(node / "agent.sock"),
        "--spool-dir", str(node / "spool"), "--host-metrics-interval", "200",
    )  # fmt: skip
    proc = subprocess.Popen(
        cmd, env=clean_env(**env), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    return watched(proc)


def watched(proc: subprocess.Popen[str]) -> Daemon:
    """A started daemon process, its stderr read as it comes, once it says it listens."""
    daemon = Daemon(proc)
    ready = threading.Event()

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            daemon.lines.append(line)
            if "daemon listening on" in line:
                ready.set()
        ready.set()

    threading.Thread(target=pump, daemon=True).start()
    if not ready.wait(60) or proc.poll() is not None:
        proc.kill()
        raise RuntimeError("daemon did not start:\n" + daemon.output())
    return daemon
