"""Hand-made jobs for the analysis and advice tests: rows with known answers."""

from __future__ import annotations

from typing import Any

import numpy as np

from tfprof.collector.jobdata import RECORD_COLUMNS, DeviceMeta, DropCounts, JobData, StreamData

T0 = 1_700_000_000_000_000_000
US = 1_000


def stream(
    rows: list[dict[str, Any]],
    *,
    job: str = "train",
    pid: int = 1,
    uuid: str = "GPU-a",
    names: list[str] | None = None,
    shift: int = 0,
    dropped: DropCounts | None = None,
) -> StreamData:
    """``rows``: dicts of record columns; start/dur in us (``start``, ``dur``)."""
    cols = {c: np.zeros(len(rows), dtype=np.int64) for c in RECORD_COLUMNS}
    for i, row in enumerate(rows):
        for key, value in row.items():
            if key == "start":
                cols["start_ns"][i] = T0 + value * US
            elif key == "dur":
                cols["duration_ns"][i] = value * US
            else:
                cols[key][i] = value
    ordinals = {int(d) for d in cols["device"].tolist()} or {0}
    return StreamData(
        job=job, run_id="r1", host="h", pid=pid, task=str(pid), records=cols,
        strings=names or ["", "gemm", "relu", "tiny"], record_shift_ns=shift,
        devices={o: DeviceMeta(ordinal=o, uuid=uuid if o == 0 else f"{uuid}{o}") for o in ordinals},
        dropped=dropped or DropCounts(),
    )  # fmt: skip


def job(name: str, *streams: StreamData) -> JobData:
    return JobData(name=name, run_id="r1", streams=list(streams))


def kernel(start: int, dur: int, name: int = 1, stream: int = 7, **kw: int) -> dict[str, Any]:
    return {"kind": 1, "start": start, "dur": dur, "name": name, "stream": stream, **kw}


def copy(
    start: int, dur: int, nbytes: int = 0, kind: int = 1, src: int = 2, dst: int = 3,
    stream: int = 7, **kw: int,
) -> dict[str, Any]:  # fmt: skip
    return {"kind": 2, "start": start, "dur": dur, "bytes": nbytes, "copy_kind": kind,
            "src_kind": src, "dst_kind": dst, "stream": stream, **kw}  # fmt: skip


def memset(start: int, dur: int, stream: int = 7) -> dict[str, Any]:
    return {"kind": 3, "start": start, "dur": dur, "stream": stream, "bytes": 64}


def sync(start: int, dur: int, sync_type: int = 3, stream: int = 7) -> dict[str, Any]:
    return {"kind": 4, "start": start, "dur": dur, "sync_type": sync_type, "stream": stream}
