"""export/args.py and chrome_rows.py: every exporter writes the args of
tfprof.core.slice_args, in its order, formatted a column at a time."""

from __future__ import annotations

import io
import json
import math
from typing import Any

import numpy as np

from tests.unit.odd_kinds import odd_kind
from tfprof.collector.export import ChromeReporter
from tfprof.collector.export.args import dim3_column, label_column, rate_column
from tfprof.collector.jobdata import RECORD_COLUMNS, JobData, StreamData
from tfprof.collector.merged.whole import build_timeline
from tfprof.core.cupti_labels import COPY_KINDS, MEMORY_KINDS, PEER_COPY
from tfprof.core.records import RecordKind
from tfprof.core.slice_args import BY_KIND, args_of, category_of

UNKNOWN_CORRELATION = 99


def _timeline() -> Any:
    rows: list[dict[str, int]] = [
        {"kind": RecordKind.KERNEL, "grid_x": 2, "grid_y": 1, "grid_z": 1},
        {"kind": RecordKind.MEMCPY, "copy_kind": 1, "bytes": 1000},
        {"kind": RecordKind.MEMCPY, "copy_kind": PEER_COPY, "dst_device": 1, "bytes": 10},
        {"kind": RecordKind.MEMSET, "src_kind": 3},
        {"kind": RecordKind.SYNC, "sync_type": 3},
        {"kind": RecordKind.MEMSET, "correlation": UNKNOWN_CORRELATION},  # made unknown below
    ]
    cols = {c: np.zeros(len(rows), dtype=np.int64) for c in RECORD_COLUMNS}
    for i, row in enumerate(rows):
        cols["start_ns"][i], cols["duration_ns"][i], cols["stream"][i] = 100 * i, 50, 7
        for key, value in row.items():
            cols[key][i] = value
    s = StreamData(job="j", run_id="r", host="h", pid=1, task="0", records=cols)
    return odd_kind(build_timeline([JobData("j", "r", [s])]), UNKNOWN_CORRELATION)


def _slices() -> list[dict[str, Any]]:
    out = io.BytesIO()
    ChromeReporter(_timeline()).render(out)
    events = json.loads(out.getvalue())["traceEvents"]
    return [e for e in events if e["ph"] == "X"]  # copies twice: on their stream and memcpy


def test_chrome_args_are_the_table_in_its_order() -> None:
    slices = _slices()
    for e in slices:
        kind = {"activity": None, **{category_of(k): k for k in BY_KIND if k}}[e["cat"]]
        names = [a.name for a in args_of(kind)]
        if kind == RecordKind.MEMCPY and e["args"].get("kind") != "PtoP":
            names.remove("dst device")  # only a peer copy has a destination device
        assert list(e["args"]) == names, e
    assert {e["cat"] for e in slices} == {"kernel", "memcpy", "memset", "sync", "activity"}
    peer = next(e for e in slices if e["args"].get("kind") == "PtoP")
    assert peer["args"]["dst device"] == 1 and peer["args"]["GB/s"] == 0.2


def test_label_column_falls_back_for_values_cupti_may_add() -> None:
    values = np.array([1, 10, 0, 11, -1, 99])
    assert label_column(COPY_KINDS, values) == ["HtoD", "PtoP", "Unknown", *["Unknown"] * 3]
    assert label_column(MEMORY_KINDS, np.array([2, 7])) == ["pinned", "managed_static"]


def test_dim3_and_rate_columns() -> None:
    small = dim3_column(np.array([1, 128, 1]), np.array([1, 2, 1]), np.array([1, 1, 1]))
    assert small == ["(1, 1, 1)", "(128, 2, 1)", "(1, 1, 1)"]
    big = dim3_column(np.array([1 << 40]), np.array([1 << 20]), np.array([3]))
    assert big == [f"({1 << 40}, {1 << 20}, 3)"]
    rates = rate_column(np.array([1000, 5]), np.array([3, 0]))
    assert rates[0] == 333.333 and math.isnan(rates[1])  # no duration, no rate (null)
