"""A small Kineto trace of device-memory records for the memory view and rule tests:
one kernel, then allocations to a 4,000-byte peak on a GPU of ``capacity`` bytes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def memory_trace(tmp_path: Path, capacity: int) -> Path:
    def memory(ts: int, nbytes: int) -> dict[str, Any]:
        args = {"Device Type": 1, "Device Id": 0, "Addr": 4096 + ts, "Bytes": nbytes,
                "Total Allocated": 0, "Total Reserved": 0}  # fmt: skip
        return {"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 2, "ts": ts, "args": args}

    kernel = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 0, "dur": 80,
              "args": {"device": 0, "stream": 7, "correlation": 0}}  # fmt: skip
    events = [kernel, memory(10, 1000), memory(20, 3000), memory(30, -1000), memory(50, -3000)]
    doc = {"traceEvents": events,
           "deviceProperties": [{"id": 0, "name": "GPU", "totalGlobalMem": capacity}]}  # fmt: skip
    path = tmp_path / f"memory_{capacity}.json"
    path.write_text(json.dumps(doc))
    return path
