"""Whether a traced process has ended, and how, as its relay can tell from outside.

A process that ends without its hook's goodbye (SIGTERM's default action and
``os._exit`` skip the interpreter's exit hooks; schedulers end jobs with SIGTERM) is not
lost: its relay saw it go. The launcher reaped its own child and knows its status; for
every other process (forks, grandchildren, a node daemon's clients) the relay watches
``/proc/PID``: the process's start time, read at hello, tells it from a later process
that got the same pid, and a zombie still shows its exit status. Such a stream ends with
a goodbye the relay makes (``Goodbye.end``): finished, with the relay's counts, rather
than "agent lost", which stays for a relay that itself died.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass

from tfprof.proto import collector_pb2 as pb

# A closed socket comes a moment before the process is gone: on a loaded host, seconds
# (the wait is in the connection's own reader thread).
GONE_WAIT_S = 5.0


@dataclass(frozen=True)
class ProcessEnd:
    """How a process ended: ``end`` a ``pb.ProcessEnd`` value, with its exit code or
    signal where known."""

    end: int
    exit_code: int = 0
    signal: int = 0

    @classmethod
    def from_status(cls, code: int) -> ProcessEnd:
        """From a status as ``os.waitstatus_to_exitcode`` gives it (negative: a signal)."""
        if code < 0:
            return cls(pb.SIGNALED, 128 - code, -code)
        return cls(pb.EXITED, code)

    def describe(self) -> str:
        if self.end == pb.SIGNALED:
            return f"ended by {_signal_name(self.signal)}"
        if self.end == pb.EXITED:
            return f"exited with status {self.exit_code}"
        return "ended without a goodbye"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat from its third field on (state first); None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode("ascii", "replace")
    except OSError:
        return None
    return raw.rpartition(")")[2].split()  # the command name may hold spaces and ')'


class ProcessWatch:
    """One process, told apart from a later one with its pid by its start time."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        fields = _stat_fields(pid) if pid > 0 else None
        self.start_time = fields[19] if fields and len(fields) > 19 else None
        # The kernel named the pid when it connected (SO_PEERCRED): gone already by its
        # hello means it ended (a fork that exits at once), not that we cannot see it.
        self.gone_at_hello = pid > 0 and fields is None and os.path.isdir("/proc/self")

    def ended(self) -> ProcessEnd | None:
        """How the process ended, or None while it lives (or cannot be told)."""
        if self.gone_at_hello:
            return ProcessEnd(pb.GONE)
        if self.start_time is None:
            return None
        fields = _stat_fields(self.pid)
        if fields is None or len(fields) <= 19 or fields[19] != self.start_time:
            return ProcessEnd(pb.GONE)  # reaped (by its parent), or the pid reused
        if fields[0] not in ("Z", "X"):
            return None
        if len(fields) > 49 and fields[49].isdigit():  # a zombie keeps its wait status
            return _from_wait_status(int(fields[49]))
        return ProcessEnd(pb.GONE)

    def wait_ended(self, timeout: float = GONE_WAIT_S) -> ProcessEnd | None:
        deadline = time.monotonic() + timeout
        while True:
            found = self.ended()
            if found is not None or time.monotonic() >= deadline:
                return found
            time.sleep(0.02)


def _from_wait_status(status: int) -> ProcessEnd:
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        return ProcessEnd(pb.SIGNALED, 128 + number, number)
    if os.WIFEXITED(status):
        return ProcessEnd(pb.EXITED, os.WEXITSTATUS(status))
    return ProcessEnd(pb.GONE)
