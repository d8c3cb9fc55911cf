"""``summary --view memory --by code``: device memory live at each job's peak by the
Python line that allocated it. A stream written through the store as a live one would
be (records, then stack frames, nodes and samples), read back through the lake and
DuckDB by the command; its allocations, releases, CUDA calls and samples are chosen so
the answer is known."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tfprof.collector.cli import main as collector
from tfprof.collector.jobdata import RECORD_COLUMNS, StreamData
from tfprof.collector.store import Store
from tfprof.collector.store.importer import _write_stream
from tfprof.core.code_stacks import StackBatch
from tfprof.core.records import RecordTable

THREAD = 7
MIB = 1 << 20


def stored_job(root: Path) -> None:
    strings = ["", "/home/me/train.py", "main", "build", "step", "cudaMalloc", "cudaFree"]
    stacks = StackBatch()
    main, build, step = (stacks.add_frame(1, line, fn, line) for line, fn in
                         ((10, 2), (20, 3), (30, 4)))  # fmt: skip
    at_main = stacks.add_node(0, main)
    at_build, at_step = stacks.add_node(at_main, build), stacks.add_node(at_main, step)
    stacks.add_sample(1_000, THREAD, at_build)
    stacks.add_sample(5_000, THREAD, at_step)
    t = RecordTable()

    def malloc(when: int, corr: int, address: int, size: int, call: bool = True) -> None:
        if call:
            t.add_api(start_ns=when, end_ns=when + 50, thread=THREAD, cbid=20, category=1,
                      name=5, correlation=corr)  # fmt: skip
        t.add_memory(timestamp_ns=when + 10, device=0, nbytes=size, address=address,
                     memory_op=1, correlation=corr)  # fmt: skip

    def free(when: int, corr: int, address: int, size: int) -> None:
        t.add_api(start_ns=when, end_ns=when + 50, thread=THREAD, cbid=22, category=1,
                  name=6, correlation=corr)  # fmt: skip
        t.add_memory(timestamp_ns=when + 10, device=0, nbytes=size, address=address,
                     memory_op=2, correlation=corr)  # fmt: skip

    malloc(1_500, 1, 0xA000, 100 * MIB)  # in build()
    malloc(1_600, 2, 0xB000, 200 * MIB)  # in build(), live at the peak
    free(3_000, 3, 0xA000, 100 * MIB)
    malloc(4_000, 4, 0xE000, 5 * MIB, call=False)  # its call was not recorded
    malloc(5_500, 5, 0xC000, 1000 * MIB)  # in step()
    malloc(7_000, 6, 0xA000, 50 * MIB)  # in step(), 2 us after its sample: the peak
    free(8_000, 7, 0xC000, 1000 * MIB)
    malloc(9_000, 8, 0xD000, 10 * MIB)  # after the peak
    n = len(t)
    records = {c: np.frombuffer(t.columns[i], dtype=np.int64) for i, c in
               enumerate(RECORD_COLUMNS)}  # fmt: skip
    stream = StreamData(job="mem", run_id="r1", host="h", pid=1, task="0", strings=strings,
                        records=records, finished=True, exit_code=0)  # fmt: skip
    assert stream.num_records == n
    _write_stream(Store(root), stream, "s-1", stacks)


def summary(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert collector(["summary", *args, "--format", "json"]) == 0
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


def test_bytes_live_at_the_peak_by_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    stored_job(tmp_path)
    doc = summary(capsys, "--data-dir", str(tmp_path), "--view", "memory", "--by", "code")
    rows = {r["code"]: r for r in doc["rows"]}
    main, build, step = (rows[f"/home/me/train.py:{n}:{f}"] for n, f in
                         ((10, "main"), (20, "build"), (30, "step")))  # fmt: skip
    assert (build["self_bytes"], build["allocations"]) == (200 * MIB, 1)
    assert (step["self_bytes"], step["allocations"]) == (1050 * MIB, 2)
    assert (main["self_bytes"], main["total_bytes"]) == (0, 1250 * MIB)
    assert rows["(no Python stack)"]["self_bytes"] == 5 * MIB
    assert step["peak_pct"] == pytest.approx(100 * 1050 / 1255, abs=0.01)
    assert [r["code"] for r in doc["rows"][:2]] == [step["code"], build["code"]]
    peak, how = doc["notes"]
    assert f"job mem: peak {1255 * MIB:,} bytes" in peak and "4 allocation(s) live" in peak
    assert "3 of 4 live at the peaks" in how and "1 with no allocating call" in how


def test_memory_by_code_filters(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    stored_job(tmp_path)
    doc = summary(capsys, "--data-dir", str(tmp_path), "--view", "memory", "--by", "code",
                  "--trim-name-regex", ":(build|step)$", "--select", "code,self_bytes")  # fmt: skip
    assert {r["code"]: r["self_bytes"] for r in doc["rows"]} == {
        "/home/me/train.py:10:main": 1250 * MIB, "(no Python stack)": 5 * MIB}  # fmt: skip
    assert collector(["summary", "--data-dir", str(tmp_path), "--view", "kernels", "--by",
                      "code"]) != 0  # fmt: skip
    assert "--by code applies to the memory view" in capsys.readouterr().err
