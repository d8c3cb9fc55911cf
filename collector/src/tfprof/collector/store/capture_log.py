"""``captures.jsonl`` in a data dir: every capture the collector sent, one JSON object a
line, appended and fsynced before the reply (``service/capture_windows.py`` checks and
opens captures; this is what outlives the collector), and which streams a capture's
request names (what a stored capture covers: ``export --capture``, its windows).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from tfprof.proto import collector_pb2 as pb

CAPTURES_FILE = "captures.jsonl"


def matches(request: pb.CaptureRequest, stream: pb.CaptureStream) -> bool:
    if request.all:
        return True
    if request.jobs and stream.job not in request.jobs:
        return False
    return not request.hosts or stream.host in request.hosts


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
