"""The replayed trace of the delivery tests, its records as stored, and the log's size."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tfprof.collector.store import Store

TRACE = "tf-timeline-ikhlestov/GPU_timeline_03_merged_5_runs.json"
REPEAT = 1000  # 221 records a loop: 221,000 records


def expected_records(traces: Path) -> int:
    from tfprof.readers import load_trace

    return len(load_trace(traces / TRACE)) * REPEAT


def stored_records(data_dir: Path, job: str) -> np.ndarray:
    """(start, duration, stream, correlation) of every stored record of ``job``."""
    (run,) = Store(data_dir).load_jobs([job])
    rows = [
        np.stack([s.records[c] for c in ("start_ns", "duration_ns", "stream", "correlation")], 1)
        for s in run.streams
        if s.num_records
    ]
    return np.concatenate(rows) if rows else np.zeros((0, 4), np.int64)


def log_bytes(data_dir: Path) -> int:
    return sum(p.stat().st_size for p in data_dir.glob("jobs/*/*/*/batches.log"))
