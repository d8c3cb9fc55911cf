"""The host side of the attacks: throwaway users, figures from /proc, memory cgroups."""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int


# -- users ---------------------------------------------------------------------------


def create_user(name: str) -> User:
    with contextlib.suppress(KeyError):
        pwd.getpwnam(name)
        subprocess.run(["userdel", name], check=False, capture_output=True)
    subprocess.run(
        ["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent",
         "--shell", "/usr/sbin/nologin", name],
        check=True, capture_output=True,
    )  # fmt: skip
    entry = pwd.getpwnam(name)
    return User(name, entry.pw_uid, entry.pw_gid)


def remove_user(user: User) -> None:
    subprocess.run(["userdel", user.name], check=False, capture_output=True)
    with contextlib.suppress(KeyError, subprocess.SubprocessError):
        grp.getgrnam(user.name)
        subprocess.run(["groupdel", user.name], check=False, capture_output=True)


def as_user(user: User, argv: Sequence[str], env: dict[str, str] | None = None) -> list[str]:
    """``argv`` run by ``user`` through runuser, with exactly ``env`` as environment."""
    pairs = [f"{k}={v}" for k, v in (env or {"PATH": "/usr/bin:/bin"}).items()]
    return ["runuser", "-u", user.name, "--", "/usr/bin/env", "-i", *pairs, *argv]


# -- figures ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Stats:
    rss_mb: float
    fds: int
    threads: int
    alive: bool = True

    def __str__(self) -> str:
        if not self.alive:
            return "process gone"
        return f"RSS {self.rss_mb:.0f} MB, {self.fds} fds, {self.threads} threads"


def stats(pid: int) -> Stats:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if fields.get("State", "").strip().startswith("Z"):
            return Stats(0, 0, 0, alive=False)
        rss = int(fields.get("VmRSS", "0 kB").split()[0]) / 1024
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        return Stats(rss, fds, int(fields["Threads"]))
    except (OSError, KeyError, ValueError):
        return Stats(0, 0, 0, alive=False)


def oom_kills(group: Path) -> int:
    """OOM kills in a cgroup so far (v2 memory.events, v1 memory.oom_control)."""
    for name, key in (("memory.events", "oom_kill"), ("memory.oom_control", "oom_kill")):
        with contextlib.suppress(OSError):
            for line in (group / name).read_text().splitlines():
                if line.startswith(key + " "):
                    return int(line.split()[1])
    return 0


def peak_mb(group: Path) -> float:
    for name in ("memory.peak", "memory.max_usage_in_bytes"):
        with contextlib.suppress(OSError, ValueError):
            return int((group / name).read_text()) / 1e6
    return 0.0


def remove_cgroup(group: Path) -> None:
    for _ in range(50):
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.1)


def find_memory_cgroup() -> Path | None:
    """Where this process may create memory cgroups: the v2 hierarchy when it has the
    memory controller, else v1's memory hierarchy, at our own group."""
    root = Path("/sys/fs/cgroup")
    own = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        own[controllers] = path
    candidates = []
    if (
        "memory" in (root / "cgroup.controllers").read_text(errors="ignore").split()
        if (root / "cgroup.controllers").exists()
        else False
    ):
        candidates.append(root / own.get("", "/").lstrip("/"))
    for controllers, path in own.items():
        if "memory" in controllers.split(","):
            candidates.append(root / "memory" / path.lstrip("/"))
    for candidate in candidates:
        probe = candidate / f"tfprof-attack-probe-{os.getpid()}"
        try:
            probe.mkdir()
        except OSError:
            continue
        probe.rmdir()
        return candidate
    return None
