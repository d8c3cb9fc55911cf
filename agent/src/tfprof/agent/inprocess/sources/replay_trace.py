"""What a replay reads of a recorded trace beyond its records: whether it is one replay
can read, its step starts and the devices it says it ran on."""

from __future__ import annotations

import os
import re
import socket

from tfprof.core.records import DeviceInfo, RecordKind
from tfprof.readers import RecordedTrace, TraceFormatError
from tfprof.readers.load import looks_like_json_trace

_STEP_NAME = re.compile(r"ProfilerStep#\d+")


def check_replay_trace(path: str) -> None:
    """Raise ``UsageError`` (one line) unless ``path`` looks like a trace replay can read.

    Reads only the file's start (gzip magic, then the first bytes of JSON), so it stays
    cheap for big traces; the launcher calls it before the job starts.
    """
    from tfprof.agent.inprocess.errors import UsageError

    if not os.path.isfile(path):
        raise UsageError(f"replay trace not found: {path}")
    try:
        readable = looks_like_json_trace(path)
    except OSError as exc:
        raise UsageError(f"replay trace {path}: cannot read it ({exc.strerror or exc})") from None
    except TraceFormatError as exc:
        raise UsageError(f"replay trace {exc}") from None
    if not readable:
        raise UsageError(
            f"replay trace {path}: not a trace replay can read (Chrome, TF timeline or "
            "Kineto JSON, gzip or not)"
        )


def step_starts(trace: RecordedTrace) -> list[int]:
    """Starts of the trace's host step ranges (``ProfilerStep#N`` on a host thread)."""
    kinds, names, threads = trace.column("kind"), trace.column("name"), trace.column("thread")
    steps = {i for i, text in enumerate(trace.names) if _STEP_NAME.fullmatch(text)}
    if not steps:
        return []
    starts = trace.column("start_ns")
    return [
        starts[i]
        for i in range(len(trace))
        if kinds[i] == RecordKind.MARKER and names[i] in steps and threads[i]
    ]


def replay_devices(trace: RecordedTrace) -> list[DeviceInfo]:
    # Deterministic per host and ordinal: two jobs replaying on one host share "a GPU",
    # which is what the contention view groups by.
    host = socket.gethostname()
    devices: list[DeviceInfo] = []
    for recorded in trace.devices:
        info = recorded.copy()  # a DeviceInfo still; the trace's own stays untouched
        ordinal = recorded["ordinal"]
        info["uuid"] = f"GPU-replay-{host}-{ordinal}"
        info.setdefault("name", "replayed GPU")
        devices.append(info)
    return devices
