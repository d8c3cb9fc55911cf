"""Capture windows: check a request, match it against live streams, keep a durable record.

A capture asks every matching traced process to record GPU activity from one instant on
the collector's clock for a given duration, or for a number of whole steps (each process
opens and closes at its own step boundaries; the duration then bounds how long that
may take). The server sends each matching stream a
``CaptureWindow``; streams that say hello while a window is still open (a rank that
starts late, an agent that reconnects) get it too, so agents must ignore a capture id
they have already seen. Every capture is appended to ``captures.jsonl`` in the data dir
(fsynced before the reply), so ``tfprof-collector captures`` lists it after a restart.
Nothing here knows about gRPC.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tfprof.collector.errors import InvalidArgument, NotFound
from tfprof.proto import collector_pb2 as pb

CAPTURES_FILE = "captures.jsonl"
MAX_DURATION_NS = 3600 * 10**9  # an hour of every kernel of every rank is already huge
MAX_START_IN_NS = 3600 * 10**9
MAX_STEPS = 100_000


def check_request(request: pb.CaptureRequest) -> None:
    """Raise ``InvalidArgument`` unless ``request`` names what to capture and for how long."""
    if request.all and (request.jobs or request.hosts):
        raise InvalidArgument("a capture of all streams takes no job or host")
    if not (request.all or request.jobs or request.hosts):
        raise InvalidArgument("say which streams to capture: jobs, hosts, or all")
    if not 0 < request.duration_ns <= MAX_DURATION_NS:
        raise InvalidArgument(
            f"capture duration {request.duration_ns} ns: expected more than 0 and at most 1 h"
        )
    if not 0 <= request.start_in_ns <= MAX_START_IN_NS:
        raise InvalidArgument(
            f"capture start-in {request.start_in_ns} ns: expected 0 to 1 h from now"
        )
    if request.steps > MAX_STEPS or request.skip_steps > MAX_STEPS:
        raise InvalidArgument(f"capture steps {request.steps}, skip {request.skip_steps}: "
                              f"at most {MAX_STEPS:,} each")  # fmt: skip
    if request.skip_steps and not request.steps:
        raise InvalidArgument("skip-steps needs steps: say how many steps to capture")


def matches(request: pb.CaptureRequest, stream: pb.CaptureStream) -> bool:
    if request.all:
        return True
    if request.jobs and stream.job not in request.jobs:
        return False
    return not request.hosts or stream.host in request.hosts


def new_capture(request: pb.CaptureRequest, now_ns: int) -> pb.Capture:
    """A capture id and its window on the collector's clock (no streams yet)."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now_ns / 1e9))
    return pb.Capture(
        capture_id=f"cap-{stamp}-{secrets.token_hex(3)}",
        requested_ns=now_ns,
        start_ns=now_ns + request.start_in_ns,
        duration_ns=request.duration_ns,
        request=request,
    )


def window_of(capture: pb.Capture) -> pb.CaptureWindow:
    return pb.CaptureWindow(
        capture_id=capture.capture_id,
        start_ns=capture.start_ns,
        duration_ns=capture.duration_ns,
        steps=capture.request.steps,
        skip_steps=capture.request.skip_steps,
    )


def describe_targets(request: pb.CaptureRequest) -> str:
    if request.all:
        return "any stream"
    parts = []
    if request.jobs:
        parts.append("job " + ", ".join(request.jobs))
    if request.hosts:
        parts.append("host " + ", ".join(request.hosts))
    return " on ".join(parts)


def no_match(request: pb.CaptureRequest, live: int) -> NotFound:
    return NotFound(
        f"no live stream matches {describe_targets(request)} ({live} stream(s) connected): "
        "nothing was captured"
    )


# -- the durable record ------------------------------------------------------------------

# No stream id: see streams_registry.identity_of (older files' ids are not read back).
_STREAM_FIELDS = ("job", "host", "pid", "task", "run_id")


def to_json(capture: pb.Capture) -> dict[str, Any]:
    request = capture.request
    return {
        "capture_id": capture.capture_id,
        "requested_ns": capture.requested_ns,
        "start_ns": capture.start_ns,
        "duration_ns": capture.duration_ns,
        "start_in_ns": request.start_in_ns,
        "steps": request.steps,
        "skip_steps": request.skip_steps,
        "jobs": list(request.jobs),
        "hosts": list(request.hosts),
        "all": request.all,
        "streams": [{f: getattr(s, f) for f in _STREAM_FIELDS} for s in capture.streams],
    }


def from_json(data: dict[str, Any]) -> pb.Capture:
    request = pb.CaptureRequest(
        jobs=data.get("jobs", []),
        hosts=data.get("hosts", []),
        all=bool(data.get("all", False)),
        duration_ns=int(data["duration_ns"]),
        start_in_ns=int(data.get("start_in_ns", 0)),
        steps=int(data.get("steps", 0)),
        skip_steps=int(data.get("skip_steps", 0)),
    )
    return pb.Capture(
        capture_id=str(data["capture_id"]),
        requested_ns=int(data["requested_ns"]),
        start_ns=int(data["start_ns"]),
        duration_ns=int(data["duration_ns"]),
        request=request,
        streams=[
            pb.CaptureStream(**{f: s[f] for f in _STREAM_FIELDS if f in s})
            for s in data.get("streams", [])
        ],
    )


class CaptureLog:
    """``captures.jsonl`` in a data dir: one JSON object per line, appended and fsynced."""

    def __init__(self, data_dir: str | os.PathLike[str], fsync: bool = True) -> None:
        self.path = Path(data_dir) / CAPTURES_FILE
        self.fsync = fsync
        self._lock = threading.Lock()

    def append(self, capture: pb.Capture) -> None:
        line = json.dumps(to_json(capture), separators=(",", ":")) + "\n"
        with self._lock, open(self.path, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            if self.fsync:
                os.fsync(f.fileno())

    def read(self) -> list[pb.Capture]:
        """Every capture recorded, oldest first; a torn or damaged line (a crash during an
        append) is skipped."""
        try:
            with open(self.path, encoding="utf-8", errors="replace") as f:
                lines = f.readlines()
        except FileNotFoundError:
            return []
        captures = []
        for line in lines:
            try:
                captures.append(from_json(json.loads(line)))
            except (ValueError, KeyError, TypeError):
                continue
        return captures


def still_open(captures: Iterable[pb.Capture], now_ns: int) -> list[pb.Capture]:
    """The captures whose window has not ended at ``now_ns``."""
    return [c for c in captures if c.start_ns + c.duration_ns > now_ns]
