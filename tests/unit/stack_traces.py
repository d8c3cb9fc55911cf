"""Recorded traces with Python stacks (TraceLens' BERT), their GPU time, and a small copy."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces" / "tracelens"
BERT = TRACES / "h100__gaunernst_bert-small-uncased__1016001.json.gz"


def gpu_us(path: Path) -> float:
    with gzip.open(path) as f:
        events = json.load(f)["traceEvents"]
    cats = ("kernel", "gpu_memcpy", "gpu_memset")
    return float(sum(e["dur"] for e in events if e.get("cat") in cats))


def tiny_trace(path: Path) -> Path:
    """One thread: main() calls step(); launches inside step, inside main after step, then
    outside any Python call (the nearest stack before it stands in), and a kernel whose
    launch was not recorded."""

    def call(ts: int, dur: int, name: str, pid: int, parent: int | None) -> dict[str, Any]:
        return {
            "ph": "X",
            "cat": "python_function",
            "name": name,
            "pid": 100,
            "tid": 1,
            "ts": ts,
            "dur": dur,
            "args": {"Python id": pid, "Python parent id": parent},
        }

    def launch(ts: int, corr: int) -> dict[str, Any]:
        return {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 100,
            "tid": 1,
            "ts": ts,
            "dur": 2,
            "args": {"correlation": corr, "cbid": 211},
        }

    def kernel(ts: int, dur: int, corr: int) -> dict[str, Any]:
        return {
            "ph": "X",
            "cat": "kernel",
            "name": "k",
            "pid": 0,
            "tid": 7,
            "ts": ts,
            "dur": dur,
            "args": {"correlation": corr, "device": 0, "stream": 7},
        }

    events = [call(1000, 100, "train.py(10): main", 1, None),
              call(1010, 20, "train.py(20): step", 2, 1),
              launch(1015, 11), kernel(1100, 50, 11),
              launch(1040, 12), kernel(1200, 30, 12),
              launch(1200, 13), kernel(1300, 20, 13),
              kernel(1400, 10, 14)]  # fmt: skip
    path.write_text(json.dumps({"traceEvents": events}))
    return path
