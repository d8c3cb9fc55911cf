"""Hand-made records, streams and timeline lookups for the build_timeline tests."""

from __future__ import annotations

from typing import Any

import numpy as np

from tfprof.collector.jobdata import HOST_COLUMNS, RECORD_COLUMNS, StreamData
from tfprof.collector.merged.whole import WholeTimeline as Timeline
from tfprof.collector.timeline.model import SliceTrack
from tfprof.core.records import RecordKind

STRINGS = ["", "gemm_kernel", "relu_kernel"]


def kernel(start: int, dur: int, stream: int = 7, device: int = 0, **kw: int) -> dict[str, int]:
    return {"kind": RecordKind.KERNEL, "start_ns": start, "duration_ns": dur, "stream": stream,
            "device": device, "name": 1, **kw}  # fmt: skip


def memcpy(start: int, dur: int, nbytes: int = 1024, copy_kind: int = 1, stream: int = 7,
           device: int = 0, **kw: int) -> dict[str, int]:  # fmt: skip
    return {"kind": RecordKind.MEMCPY, "start_ns": start, "duration_ns": dur, "stream": stream,
            "device": device, "bytes": nbytes, "copy_kind": copy_kind, **kw}  # fmt: skip


def memset(start: int, dur: int, stream: int = 7, device: int = 0, **kw: int) -> dict[str, int]:
    return {"kind": RecordKind.MEMSET, "start_ns": start, "duration_ns": dur, "stream": stream,
            "device": device, "bytes": 64, "src_kind": 3, **kw}  # fmt: skip


def records(rows: list[dict[str, int]]) -> dict[str, np.ndarray]:
    cols = {c: np.zeros(len(rows), dtype=np.int64) for c in RECORD_COLUMNS}
    for i, row in enumerate(rows):
        for key, value in row.items():
            cols[key][i] = value
    return cols


def host(times: list[int], cpu: list[float] | None = None) -> dict[str, np.ndarray]:
    n = len(times)
    samples = {c: np.arange(n, dtype=np.int64) + 1 for c in HOST_COLUMNS}
    samples["time_ns"] = np.asarray(times, dtype=np.int64)
    samples["cpu_percent"] = np.asarray(cpu if cpu is not None else [50.0] * n)
    return samples


def stream(rows: list[dict[str, int]], **kw: Any) -> StreamData:
    fields: dict[str, Any] = {"job": "train", "run_id": "r1", "host": "h1", "pid": 100,
                              "task": "0", "strings": list(STRINGS)}  # fmt: skip
    fields.update(kw)
    return StreamData(records=records(rows), **fields)


def proc_names(tl: Timeline) -> list[str]:
    return [p.name for p in sorted(tl.processes, key=lambda p: p.sort_index)]


def track(tl: Timeline, name: str) -> SliceTrack:
    (found,) = [t for t in tl.slices if t.name == name]
    return found
