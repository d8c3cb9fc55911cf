"""A real memory cgroup for a test's process: cgroup v2 ``memory.max`` where the unified
hierarchy has the memory controller, else v1 ``memory.limit_in_bytes``, under this
process's own group. Tests skip, with the reason, where none can be made."""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class MemoryGroup:
    path: Path

    def enter(self) -> Callable[[], None]:
        """A preexec function that moves the child into the group."""
        procs = str(self.path / "cgroup.procs")

        def move() -> None:
            with open(procs, "w") as f:
                f.write(str(os.getpid()))

        return move

    def _read(self, *names: str) -> str:
        for name in names:
            with contextlib.suppress(OSError):
                return (self.path / name).read_text()
        return ""

    @property
    def peak_bytes(self) -> int:
        raw = self._read("memory.peak", "memory.max_usage_in_bytes").strip()
        return int(raw) if raw.isdigit() else 0

    @property
    def oom_kills(self) -> int:
        for line in self._read("memory.events", "memory.oom_control").splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
        return 0


def _parent() -> Path | None:
    own: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        own[controllers] = path
    candidates = []
    unified = ROOT / "cgroup.controllers"
    if unified.exists() and "memory" in unified.read_text().split():
        candidates.append(ROOT / own.get("", "/").lstrip("/"))
    for controllers, path in own.items():
        if "memory" in controllers.split(","):
            candidates.append(ROOT / "memory" / path.lstrip("/"))
    for candidate in candidates:
        probe = candidate / f"tfprof-probe-{uuid.uuid4().hex[:8]}"
        try:
            probe.mkdir()
        except OSError:
            continue
        probe.rmdir()
        return candidate
    return None


@contextlib.contextmanager
def memory_group(limit_bytes: int) -> Iterator[MemoryGroup]:
    parent = _parent()
    if parent is None:
        pytest.skip("no writable memory cgroup here (needs root and a memory controller)")
    path = parent / f"tfprof-test-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    try:
        if (path / "memory.max").exists():
            (path / "memory.max").write_text(str(limit_bytes))
            with contextlib.suppress(OSError):
                (path / "memory.swap.max").write_text("0")
        else:
            (path / "memory.limit_in_bytes").write_text(str(limit_bytes))
            with contextlib.suppress(OSError):
                (path / "memory.memsw.limit_in_bytes").write_text(str(limit_bytes))
        yield MemoryGroup(path)
    finally:
        for _ in range(100):  # once its processes are gone
            try:
                path.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.1)
