"""A small timeline of two jobs, built from record rows, and its Chrome JSON rendering."""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np

from tests.unit.merge_rows import records
from tests.unit.odd_kinds import odd_kind
from tfprof.collector.export import (
    ChromeReporter,
)
from tfprof.collector.jobdata import HOST_COLUMNS, DeviceMeta, JobData, StreamData
from tfprof.collector.merged.whole import WholeTimeline as Timeline
from tfprof.collector.merged.whole import build_timeline
from tfprof.collector.timeline.model import GroupBy
from tfprof.core.records import RecordKind

T0 = 1_700_000_000_000_000_000


def sample_timeline(group_by: GroupBy = "job") -> Timeline:
    rows = [
        # kernel: starts first, 1234567 ns long, grid (128, 2, 1), block (256, 1, 1)
        {"kind": RecordKind.KERNEL, "start_ns": T0, "duration_ns": 1_234_567, "stream": 7,
         "device": 0, "context": 1, "correlation": 11, "name": 1, "grid_x": 128, "grid_y": 2,
         "grid_z": 1, "block_x": 256, "block_y": 1, "block_z": 1, "registers": 40,
         "static_smem": 1024, "dynamic_smem": 2048},
        # overlapping kernel on the same stream -> lane 1
        {"kind": RecordKind.KERNEL, "start_ns": T0 + 1500, "duration_ns": 2500, "stream": 7,
         "device": 0, "context": 1, "correlation": 12, "name": 1, "grid_x": 1, "grid_y": 1,
         "grid_z": 1, "block_x": 32, "block_y": 1, "block_z": 1},
        # 1 MB host-to-device copy in 500 µs: 1e6 bytes / 500e3 ns = 2 GB/s
        {"kind": RecordKind.MEMCPY, "start_ns": T0 + 2_000_000, "duration_ns": 500_000,
         "stream": 13, "device": 0, "context": 1, "correlation": 13, "bytes": 1_000_000,
         "copy_kind": 1, "src_kind": 1, "dst_kind": 3},
        # zero-length peer copy: no rate, names its destination device
        {"kind": RecordKind.MEMCPY, "start_ns": T0 + 3_000_000, "duration_ns": 0,
         "stream": 13, "device": 0, "context": 1, "correlation": 14, "bytes": 64,
         "copy_kind": 10, "src_kind": 3, "dst_kind": 3, "dst_device": 1},
        {"kind": RecordKind.MEMSET, "start_ns": T0 + 4_000_000, "duration_ns": 1000,
         "stream": 13, "device": 0, "context": 1, "correlation": 15, "bytes": 4096,
         "src_kind": 3},
        # made a record kind this version does not know below (odd_kind)
        {"kind": RecordKind.MEMSET, "start_ns": T0 + 5_000_000, "duration_ns": 10,
         "stream": 13, "device": 0, "correlation": 16},
    ]  # fmt: skip
    host = {c: np.array([1, 2], dtype=np.int64) for c in HOST_COLUMNS}
    host["time_ns"] = np.array([T0 + 10, T0 + 1_000_010], dtype=np.int64)
    host["cpu_percent"] = np.array([12.5, 99.0])
    host["rss_bytes"] = np.array([1 << 30, 2 << 30], dtype=np.int64)
    stream = StreamData(
        job="train", run_id="r1", host="h1", pid=100, task="0",
        strings=["", 'gemm<"fp16">\\kernel'],
        devices={0: DeviceMeta(0, "GPU-abc", "NVIDIA H100")},
        records=records(rows), host_samples=host,
    )  # fmt: skip
    return odd_kind(build_timeline([JobData("train", "r1", [stream])], group_by=group_by), 16)


def render(timeline: Timeline, **kw: Any) -> dict[str, Any]:
    buf = io.BytesIO()
    ChromeReporter(timeline, **kw).render(buf)
    result: dict[str, Any] = json.loads(buf.getvalue())
    return result


def slices(trace: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in trace["traceEvents"] if e["ph"] == "X"]
