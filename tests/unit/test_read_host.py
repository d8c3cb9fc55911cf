"""The read engine's host pieces (launch links, op attribution, queue depth) against the
whole-process rules (``whole_launches.launches``: ``flows.link_launches``,
``attribution.attribute_ops``, ``queue_depth``) on random processes cut into random
chunks, so state is carried often and instants fall on chunk edges."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.unit.launch_rows import LaunchRows, SweptNeed
from tests.unit.stored_jobs import stored_catalog
from tests.unit.whole_launches import launches
from tfprof.collector.jobdata import RECORD_COLUMNS, DeviceMeta, JobData, StreamData
from tfprof.collector.read import engine, time_chunks
from tfprof.collector.read.host_launches import ChunkLaunches
from tfprof.collector.read.launch_links import KeyBook
from tfprof.collector.read.time_chunks import Chunk

T0 = 1_700_000_000_000_000_000
KERNEL, COPY, MEMSET, SYNC, API, MARKER = 1, 2, 3, 4, 5, 6


def _process(rng: np.random.Generator, pid: int) -> tuple[StreamData, list[str]]:
    """One process: nested ranges on a few threads (some tf_op ops named <node>:<type>,
    some with External ids), API calls inside them, and the GPU records the calls
    launched (some calls launch several: graph launches; some ids unknown, missing or
    carried by two calls), on a few streams, each starting at or after its call."""
    strings = ["", "tf_op", "cpu_op"]
    nodes = [f"n{i}" for i in range(4)]
    strings += nodes + [f"n{i}:Op" for i in range(4)] + [f"r{i}" for i in range(6)]
    strings += [f"cuLaunch{i}" for i in range(5)]
    rows: list[dict[str, int]] = []
    t = 0
    ext = 1
    for _ in range(int(rng.integers(3, 30))):  # top-level ranges on a thread
        thread = int(rng.integers(1, 4))
        top = t + int(rng.integers(0, 50))
        length = int(rng.integers(10, 400))
        named = int(rng.integers(0, 3)) == 0
        name = strings.index(f"n{int(rng.integers(0, 4))}:Op") if named else 11
        rows.append(dict(kind=MARKER, start_ns=T0 + top, duration_ns=length, thread=thread,
                         name=name, category=1 if named else 2,
                         external_id=ext if rng.random() < 0.5 else 0))  # fmt: skip
        ext += int(rng.integers(1, 3)) if rng.random() < 0.9 else 0  # some ids repeat
        for _ in range(int(rng.integers(0, 4))):  # nested ranges, sometimes sharing a start
            a = top + int(rng.integers(0, length))
            rows.append(dict(kind=MARKER, start_ns=T0 + a, thread=thread,
                             duration_ns=int(rng.integers(0, length)),
                             name=12 + int(rng.integers(0, 5)), category=2))  # fmt: skip
        t = top + int(rng.integers(0, length + 50))
    calls = int(rng.integers(5, 120))
    corr = 1
    for _ in range(calls):
        thread = int(rng.integers(1, 4))
        c = int(rng.integers(0, t + 100))
        rows.append(dict(kind=API, start_ns=T0 + c, duration_ns=int(rng.integers(0, 20)),
                         thread=thread, correlation=corr,
                         name=strings.index(f"cuLaunch{int(rng.integers(0, 5))}")))  # fmt: skip
        for _ in range(int(rng.choice([0, 1, 1, 1, 2, 3]))):
            kind = int(rng.choice([KERNEL, KERNEL, COPY, MEMSET, SYNC]))
            node = int(rng.integers(3, 7))
            rows.append(dict(kind=kind, start_ns=T0 + c + int(rng.integers(0, 300)), launched=c,
                             duration_ns=int(rng.integers(0, 60)), device=int(rng.integers(0, 2)),
                             stream=int(rng.integers(7, 9)), name=node,
                             correlation=int(rng.choice([corr, corr, corr, 0, 10_000 + corr])),
                             external_id=int(rng.integers(0, ext + 1)) if rng.random() < 0.3
                             else 0))  # fmt: skip
        corr += 1 if rng.random() < 0.95 else 0  # now and then two calls share an id
    # A stream runs its work in launch order: a record launched later starts no earlier.
    reach: dict[tuple[int, int], int] = {}
    for r in sorted((r for r in rows if "launched" in r), key=lambda r: r.pop("launched")):
        key = (r["device"], r["stream"])
        r["start_ns"] = reach[key] = max(r["start_ns"], reach.get(key, 0))
    # A record's External id is that of a range started by then (Kineto's: the op that
    # launched it), or of none.
    ops = [r for r in rows if r["kind"] == MARKER and r.get("external_id")]
    ranges = sorted((r["start_ns"], r["external_id"]) for r in ops)
    for r in rows:
        if r["kind"] <= SYNC and r.get("external_id"):
            began = [e for s, e in ranges if s <= r["start_ns"]]
            r["external_id"] = int(rng.choice(began)) if began else 0
    cols = {c: np.zeros(len(rows), dtype=np.int64) for c in RECORD_COLUMNS}
    for i, row in enumerate(rows):
        for k, v in row.items():
            cols[k][i] = v
    cols["context"] = pid * 100_000 + np.arange(len(rows))  # a GPU record, through the read
    order = rng.permutation(len(rows))  # stored in no particular order
    cols = {c: v[order] for c, v in cols.items()}
    devices = {o: DeviceMeta(ordinal=o, uuid=f"GPU-{pid}-{o}") for o in (0, 1)}
    stream = StreamData(job="j", run_id="r1", host="h", pid=pid, task=str(pid), records=cols,
                        strings=strings, devices=devices)  # fmt: skip
    return stream, strings


def _today(stream: StreamData, strings: list[str]) -> dict[int, tuple[Any, ...]]:
    """Per GPU record (its context): call name, op name, latency, queue depth."""
    r = stream.records
    category = np.where(r["kind"] == MARKER, r["category"], 0)
    found = launches({**r, "category": category}, strings)
    gpu = np.flatnonzero(r["kind"] <= SYNC)
    out = {}
    for i, row in enumerate(gpu.tolist()):
        api = int(found.api[i])
        out[int(r["context"][row])] = (
            strings[int(r["name"][api])] if api >= 0 else None,
            strings[int(found.op[i])] if found.op[i] >= 0 else None,
            int(found.latency[i]),
            int(found.queue[i]),
        )
    return out


def _host_side(
    names: Sequence[str], settled: Chunk, h: ChunkLaunches, i: int, row: int
) -> tuple[Any, ...]:
    """A GPU record's call name, op name, latency and queue depth, as ``HostLaunches``
    finds them."""
    return (
        names[int(h.call_name[i])] if h.call[i] >= 0 else None,
        names[int(h.op[i])] if h.op[i] >= 0 else None,
        int(h.latency[i]),
        int(h.queue[i]),
    )


def _collect(capacity: int = 1 << 20) -> SweptNeed:
    """Every GPU record's host side (``_host_side``), by its context column."""
    return SweptNeed(LaunchRows("context", _host_side, capacity))


def _reconnected(stream: StreamData, rng: np.random.Generator) -> list[StreamData]:
    """The process's records split between two streams (the agent reconnected): one
    link group, the same task, correlation ids shared."""
    first = rng.random(stream.num_records) < 0.5
    return [
        replace(stream, records={c: v[part] for c, v in stream.records.items()})
        for part in (first, ~first)
    ]


@pytest.mark.parametrize("seed", range(30))
def test_links_ops_and_queues_equal_the_whole_process_rules(
    seed: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(seed)
    processes = [_process(rng, pid) for pid in (1, 2)]
    want: dict[int, tuple[Any, ...]] = {}
    for stream, strings in processes:
        want.update(_today(stream, strings))
    stored = [processes[0][0], *_reconnected(processes[1][0], rng)]
    cat = stored_catalog(tmp_path, [JobData("j", "r1", streams=stored)])
    assert cat.link_groups == (0, 1)  # a reconnect's streams read as one process
    monkeypatch.setattr(time_chunks, "CHUNK_ROWS", int(rng.integers(1, 40)))
    _, (got,) = engine.read(cat, [_collect()])
    assert got == want


def test_calls_past_the_book_are_counted_and_never_linked_wrongly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(time_chunks, "CHUNK_ROWS", 8)
    rng = np.random.default_rng(7)
    stream, strings = _process(rng, 1)
    want = _today(stream, strings)
    cat = stored_catalog(tmp_path, [JobData("j", "r1", streams=[stream])])
    _, (got,) = engine.read(cat, [_collect(capacity=4)])
    assert set(got) == set(want)
    assert all(got[c][0] in (None, w[0]) for c, w in want.items())
    assert sum(g[0] is None for g in got.values()) > sum(w[0] is None for w in want.values())


def test_a_book_finds_the_newest_and_forgets_the_oldest() -> None:
    book = KeyBook(("v",), capacity=8)
    for i in range(6):
        keys = np.array([i, 100 + i, 5], dtype=np.int64)
        book.add(keys, {"v": keys * 10 + i})
    hit, values = book.find(np.array([5, 0, 105, 999], dtype=np.int64))
    assert hit.tolist() == [True, False, True, False]  # 0 fell out with the oldest block
    assert values["v"][[0, 2]].tolist() == [55, 1055]  # the newest 5
    assert book.evicted == 18 - book.size and book.size <= 8
