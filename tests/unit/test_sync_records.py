"""SYNC records (CUPTI SYNCHRONIZATION) through merge, the Chrome export and back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tfprof.collector.export import write_timeline
from tfprof.collector.jobdata import RECORD_COLUMNS, DeviceMeta, JobData, StreamData
from tfprof.collector.merged.whole import build_timeline
from tfprof.core.records import SYNC_NO_STREAM, RecordKind
from tfprof.readers import load_trace


def _job() -> JobData:
    rows = [  # kind, start, dur, stream, sync_type, name
        (RecordKind.KERNEL, 0, 1000, 7, 0, 1),
        (RecordKind.SYNC, 200, 900, 7, 3, 0),  # cudaStreamSynchronize on stream 7
        (RecordKind.SYNC, 1500, 100, SYNC_NO_STREAM, 4, 0),  # context-wide
    ]
    cols = {c: np.zeros(len(rows), dtype=np.int64) for c in RECORD_COLUMNS}
    for i, (kind, start, dur, stream_id, sync_type, name) in enumerate(rows):
        cols["kind"][i], cols["start_ns"][i], cols["duration_ns"][i] = kind, start, dur
        cols["stream"][i], cols["sync_type"][i], cols["name"][i] = stream_id, sync_type, name
        cols["correlation"][i] = 10 + i
    stream = StreamData(
        job="j", run_id="r", host="h", pid=1, task="0", strings=["", "gemm"], records=cols,
        devices={0: DeviceMeta(ordinal=0, uuid="GPU-x")},
    )  # fmt: skip
    return JobData(name="j", run_id="r", streams=[stream])


def test_sync_records_sit_on_their_stream_with_cat_sync_and_round_trip(tmp_path: Path) -> None:
    timeline = build_timeline([_job()])
    tracks = {t.name: t for t in timeline.slices}
    on7 = tracks["/job:j/task:0/gpu:0/stream:7"]
    assert sorted(timeline.names[i] for i in on7.name_id) == ["StreamSynchronize", "gemm"]
    assert "/job:j/task:0/gpu:0/stream:none" in tracks  # context-wide, as TrackKey names it

    out = tmp_path / "t.json"
    write_timeline(timeline, str(out), None)
    events = [e for e in json.loads(out.read_text())["traceEvents"] if e.get("ph") == "X"]
    syncs = [e for e in events if e["cat"] == "sync"]
    assert [e["args"]["sync type"] for e in syncs] == ["StreamSynchronize", "ContextSynchronize"]

    back = load_trace(out)
    kind = list(back.column("kind"))
    assert kind.count(RecordKind.SYNC) == 2
    sync_types = [t for k, t in zip(kind, back.column("sync_type"), strict=True) if k == 4]
    assert sync_types == [3, 4]
    assert back.per_stream_counts()[(0, SYNC_NO_STREAM)]["sync"] == 1


@pytest.mark.parametrize("label", ["none", str(SYNC_NO_STREAM)])
def test_context_wide_track_reads_back_in_either_spelling(tmp_path: Path, label: str) -> None:
    track = f"/job:j/task:0/gpu:1/stream:{label}"
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": 3, "args": {"name": track}},
        {"ph": "X", "cat": "sync", "name": "ContextSynchronize", "pid": 3, "tid": 0, "ts": 2,
         "dur": 1, "args": {"sync type": "ContextSynchronize", "context": 1}},
    ]  # fmt: skip
    out = tmp_path / "ctx.json"
    out.write_text(
        json.dumps({"otherData": {"tool": {"name": "tfprof-agent"}}, "traceEvents": events})
    )
    back = load_trace(out)
    assert back.per_stream_counts() == {
        (1, SYNC_NO_STREAM): {"kernel": 0, "memcpy": 0, "memset": 0, "sync": 1}
    }
    assert (back.column("sync_type")[0], back.column("context")[0]) == (4, 1)
