"""Second local users for tests that play a hostile (or a victim) user of a shared node:
made with useradd for the test and removed after it. Tests that need them skip, with the
reason, where this process is not root or useradd / runuser are missing."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pytest

SYSTEM_PYTHON = "/usr/bin/python3"  # every user can run it (the venv may sit under /root)


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int

    def argv(self, argv: Sequence[str], env: dict[str, str] | None = None) -> list[str]:
        """``argv`` run as this user with exactly ``env`` (runuser, then env -i)."""
        pairs = [f"{k}={v}" for k, v in (env or {"PATH": "/usr/bin:/bin"}).items()]
        return ["runuser", "-u", self.name, "--", "/usr/bin/env", "-i", *pairs, *argv]


def skip_unless_users_can_be_made() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: the test creates a second local user with useradd")
    for tool in ("useradd", "userdel", "runuser"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed: cannot play a second local user")
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        pytest.skip(f"{SYSTEM_PYTHON} is missing: the second user needs a Python it can run")


@contextlib.contextmanager
def local_users(*roles: str) -> Iterator[list[User]]:
    """One throwaway system user per role, removed (with its group) at the end."""
    skip_unless_users_can_be_made()
    made: list[User] = []
    try:
        for role in roles:
            name = f"tft{role[:5]}{uuid.uuid4().hex[:6]}"
            subprocess.run(
                ["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent",
                 "--shell", "/usr/sbin/nologin", name],
                check=True, capture_output=True, timeout=30,
            )  # fmt: skip
            entry = pwd.getpwnam(name)
            made.append(User(name, entry.pw_uid, entry.pw_gid))
        yield made
    finally:
        for user in made:
            subprocess.run(["userdel", user.name], capture_output=True, timeout=30, check=False)
            subprocess.run(["groupdel", user.name], capture_output=True, timeout=30, check=False)


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")
