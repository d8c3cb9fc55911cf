"""``pulled_chunks.stream``: the records as chunks to pull, as a sweep sees them; the
``whole_bytes`` chunk column and the ``negative`` relation column; ``lake_jobs`` (trace
files' jobs as in-memory lake streams)."""

from __future__ import annotations

import numpy as np
import pytest

from tfprof.collector.read import time_chunks
from tfprof.collector.read.clipped_sql import Relations
from tfprof.collector.read.lake_catalog import catalog
from tfprof.collector.read.pulled_chunks import stream
from tfprof.collector.read.trace_files import lake_jobs
from tfprof.collector.timeline.prepare import TimeWindow

from .analysis_data import T0, US, copy, job, kernel
from .analysis_data import stream as made

GPU = ("kernels", "copies", "memsets", "syncs")


def _jobs() -> list:  # type: ignore[type-arg]
    a = made([kernel(0, 10), copy(5, 100, 1000), kernel(50, -3), kernel(200, 5)], pid=1)
    b = made([kernel(3, 10, stream=9), copy(20, 10, 400)], pid=2, uuid="GPU-b")
    return [job("x", a), job("y", b)]


@pytest.mark.parametrize("chunk", [1, 2, 64])
def test_pulled_chunks_are_every_record_in_start_order_per_component(
    chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(time_chunks, "CHUNK_ROWS", chunk)
    cat = catalog(lake_jobs(_jobs()), TimeWindow())
    read, pulled = stream(cat, GPU, ["start_ns", "whole_bytes", "bytes"])
    parts = list(pulled)
    process = np.concatenate([p["process"] for p in parts])
    s = np.concatenate([p["s"] for p in parts])
    assert process.shape[0] == 6 and not read.damage
    for p in np.unique(process).tolist():  # each GPU its own component: one after another
        mine = np.flatnonzero(process == p)
        assert (np.diff(mine) == 1).all() and (np.diff(s[mine]) >= 0).all()
    assert sorted(np.concatenate([p["whole_bytes"] for p in parts]).tolist()) == [
        0, 0, 0, 0, 400, 1000,
    ]  # fmt: skip


def test_a_clipped_copy_keeps_its_whole_bytes_and_its_share() -> None:
    # The window cuts the 100 us copy at 55 us: bytes keeps half, whole_bytes all.
    cat = catalog(lake_jobs(_jobs()[:1]), TimeWindow(T0 + 5 * US, T0 + 55 * US))
    _, pulled = stream(cat, GPU, ["whole_bytes", "bytes"])
    rows = [
        (int(k), int(b), int(w))
        for p in pulled
        for k, b, w in zip(p["kind"], p["bytes"], p["whole_bytes"], strict=True)
    ]
    assert (2, 500, 1000) in rows


def test_the_relation_says_which_durations_were_negative() -> None:
    import duckdb

    cat = catalog(lake_jobs(_jobs()), TimeWindow())
    con = duckdb.connect()
    try:
        rel = Relations(con, cat).text("g")
        got = con.sql(f"SELECT d, negative FROM ({rel}) ORDER BY s").fetchall()
    finally:
        con.close()
    # kernel(50, -3): stored -3 us, clamped to 0 and flagged; no other record is.
    assert [d for d, negative in got if negative] == [0]
