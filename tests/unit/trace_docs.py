"""Small hand-made trace documents for the reader tests: write, process names, complete events."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any


def write_doc(tmp_path: Path, doc: Any, name: str = "trace.json", gz: bool = False) -> Path:
    data = json.dumps(doc).encode()
    path = tmp_path / name
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def meta_event(pid: int, name: str) -> dict[str, Any]:
    return {"ph": "M", "name": "process_name", "pid": pid, "args": {"name": name}}


def x_event(pid: int, ts: Any, dur: Any, label: str, /, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": "Op", "pid": pid, "tid": 0, "ts": ts, "dur": dur, "name": label,
            "args": args}  # fmt: skip
