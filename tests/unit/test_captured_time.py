"""Analyses of windowed runs count only captured time (issue 27 item 2).

Two 5 s captures 12 s apart: before, ``advise`` called the 12 s between them idle GPU
time (98 % idle, a longest gap of 11.8 s) and ``summary --view gpus`` did the same. The
windows are now a lake table (``capture_windows``: the hook's edges, as it opened and
closed them), and busy and idle percentages, gaps and time at stake never span the time
between windows; exports draw it as ``untraced`` slices."""

from __future__ import annotations

import contextlib
import gzip
import io
import itertools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.unit.whole_intervals import gaps, merge_intervals
from tfprof.collector.cli import main as collector
from tfprof.collector.read.carried_unions import NEVER, Unions
from tfprof.collector.store import Store
from tfprof.collector.timeline.captured_time import Captured
from tfprof.proto import collector_pb2 as pb

S = 10**9
T0 = 1_780_000_000 * S
WINDOWS = ((T0, T0 + 5 * S), (T0 + 17 * S, T0 + 22 * S))  # two 5 s captures, 12 s apart


def _brute(windows: list[tuple[int, int]], lo: int, hi: int) -> set[int]:
    return {t for a, b in windows for t in range(max(a, lo), min(b, hi))}


@pytest.mark.parametrize("seed", range(20))
def test_captured_measures_and_cuts_like_sets_of_instants(seed: int) -> None:
    rng = np.random.default_rng(seed)
    raw = [tuple(sorted(rng.integers(0, 300, 2).tolist())) for _ in range(int(rng.integers(1, 6)))]
    captured = Captured.union(raw)
    inside = _brute(raw, 0, 300)
    s = rng.integers(0, 300, 50)
    e = s + rng.integers(0, 100, 50)
    measured = captured.measure(s, e)
    key, cs, ce = captured.cut(np.arange(50), s, e)
    for i in range(50):
        want = {t for t in range(int(s[i]), int(e[i])) if t in inside}
        assert measured[i] == len(want)
        pieces = {t for k, a, b in zip(key, cs, ce, strict=True) if k == i for t in range(a, b)}
        assert pieces == want
    assert captured.total(0, 300) == len(inside)


@pytest.mark.parametrize("seed", range(20))
def test_unions_count_busy_and_gaps_only_in_captured_time(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, keys = int(rng.integers(1, 800)), int(rng.integers(1, 4))
    s = np.sort(rng.integers(0, 20_000, n))
    e = s + rng.integers(0, 300, n)
    k = rng.integers(0, keys, n)
    lo, hi = 0, int(e.max()) + 5
    windows = [tuple(sorted(rng.integers(0, hi, 2).tolist())) for _ in range(4)]
    captured = Captured.union(windows)
    unions = Unions(keys, lo, hi, top_gaps=2, captured=lambda key: captured if key else None)
    for a, b in itertools.pairwise(sorted({0, n, *rng.integers(0, n, 5).tolist()})):
        unions.feed(k[a:b], s[a:b], e[a:b], int(s[b]) if b < n else NEVER)
    busy, (gk, gs, gl) = unions.finish()
    merged = merge_intervals(k, s, e, keys)
    idle = gaps(merged, np.full(keys, lo), np.full(keys, hi))
    for key in range(keys):
        mine = merged.group == key
        if key == 0:  # traced throughout: as before
            assert busy[key] == merged.busy[key]
            continue
        # Busy counts records whole; what ran past a window's edge is told apart.
        assert busy[key] == merged.busy[key]
        inside = int(captured.measure(merged.start[mine], merged.end[mine]).sum())
        assert unions.outside[key] == busy[key] - inside
        # The gaps kept are the longest pieces of the whole-column gaps inside the windows.
        g = idle.group == key
        _, ps, pe = captured.cut(idle.group[g], idle.start[g], idle.end[g])
        ranked = sorted(
            zip((pe - ps).tolist(), ps.tolist(), strict=True), key=lambda x: (-x[0], x[1])
        )
        assert list(zip(gl[gk == key].tolist(), gs[gk == key].tolist(), strict=True)) == ranked[:2]


def _windowed_data_dir(d: Path) -> None:
    """One on-demand stream: kernels on two streams and copies inside two windows, the
    hook's edges as it reported them, and nothing between (12 s untraced)."""
    store = Store(d, fsync=False)
    hello = pb.Hello(protocol_version=1, job="resnet", run_id="r1", host="node1", pid=7,
                     task="0", stream_id="s0", capture_mode="on-demand",
                     devices=[pb.Device(ordinal=0, uuid="GPU-aa", name="H100")])  # fmt: skip
    writer = store.open_stream(hello)
    rng = np.random.default_rng(3)
    seq = 0
    for a, b in WINDOWS:
        seq += 1
        writer.append(pb.Batch(seq=seq, capture_edges=[pb.CaptureEdge(on=True, at_ns=a)]))
        starts = np.sort(rng.integers(a, b - 10**6, 2000))
        kind = np.where(rng.random(2000) < 0.9, pb.KERNEL, pb.MEMCPY)
        batch = pb.Batch(seq=seq + 1)
        seq += 1
        if seq == 2:
            batch.string_base = 1
            batch.strings.extend(["gemm", "relu"])
        r = batch.records
        r.kind.extend(kind.tolist())
        r.start_ns.extend(starts.tolist())
        r.duration_ns.extend(rng.integers(1000, 400_000, 2000).tolist())
        r.stream.extend(np.where(kind == pb.KERNEL, rng.choice([7, 13], 2000), 14).tolist())
        r.name.extend(np.where(kind == pb.KERNEL, rng.integers(1, 3, 2000), 0).tolist())
        r.copy_kind.extend(np.where(kind == pb.MEMCPY, 1, 0).tolist())
        r.bytes.extend(np.where(kind == pb.MEMCPY, 1 << 20, 0).tolist())
        writer.append(batch)
        seq += 1
        writer.append(pb.Batch(seq=seq, capture_edges=[pb.CaptureEdge(on=False, at_ns=b)]))
    writer.finish(pb.Goodbye(records_sent=4000))
    writer.close()


def _run(*argv: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert collector(list(argv)) == 0
    return out.getvalue()


@pytest.fixture(scope="module")
def windowed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the data dir, a copy compacted into its lake)."""
    d = tmp_path_factory.mktemp("windows") / "data"
    _windowed_data_dir(d)
    lake = d.parent / "lake"
    shutil.copytree(d, lake)
    _run("compact", "--data-dir", str(lake))
    return d, lake


@pytest.mark.parametrize("which", [0, 1])
def test_windowed_runs_count_only_captured_time(windowed: tuple[Path, Path], which: int) -> None:
    d = str(windowed[which])
    rows = json.loads(_run("sql", "--data-dir", d, "--format", "json",
                           "SELECT * FROM capture_windows ORDER BY start_ns"))  # fmt: skip
    assert [(r["mode"], r["start_ns"], r["end_ns"]) for r in rows] == [
        ("on-demand", a, b) for a, b in WINDOWS
    ]
    (run,) = json.loads(_run("sql", "--data-dir", d, "--format", "json", "SELECT * FROM runs"))
    assert run["captured_ns"] == 10 * S
    (busy,) = json.loads(_run("sql", "--data-dir", d, "--format", "json",
                              "SELECT * FROM gpu_busy"))  # fmt: skip
    first, last = busy["first_ns"], busy["last_ns"]
    traced = sum(max(0, min(b, last) - max(a, first)) for a, b in WINDOWS)
    assert busy["busy_fraction"] == pytest.approx(busy["busy_ns"] / traced, rel=1e-12)
    view = json.loads(_run("summary", "--data-dir", d, "--view", "gpus", "--format", "json"))
    (gpu,) = view["rows"]
    lo, hi = view["window"]["start_ns"], view["window"]["end_ns"]
    captured = sum(max(0, min(b, hi) - max(a, lo)) for a, b in WINDOWS)  # of the window
    assert hi - lo > captured + 11 * S  # the window spans the untraced 12 s
    busy_ns = gpu["busy_us"] * 1000
    assert gpu["busy_pct"] == round(100 * busy_ns / captured, 2)
    assert gpu["idle_pct"] == round(100 * (captured - busy_ns) / captured, 2)
    # No gap spans the 12 s between the windows: each lies inside one.
    for g in gpu["idle_gaps"]:
        start, end = g["start_ns"], g["start_ns"] + g["duration_us"] * 1000
        assert any(a <= start and end <= b + 1000 for a, b in WINDOWS), g
    (job,) = json.loads(_run("summary", "--data-dir", d, "--view", "jobs", "--format", "json"))[
        "rows"
    ]
    assert job["captured_us"] == 10 * S / 1000
    advice = json.loads(_run("advise", "--data-dir", d, "--format", "json", "--rule", "gpu-idle"))
    for finding in advice["findings"]:
        evidence = finding["evidence"]
        assert evidence["span_us"] <= 10 * S / 1000
        assert evidence["longest_idle_us"] < 5 * S / 1000
    assert "10.000 s" in _run("jobs", "--data-dir", d)


def test_exports_draw_the_untraced_span(windowed: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "t.json.gz"
    _run("export", "--data-dir", str(windowed[0]), "-o", str(out))
    doc = json.loads(gzip.decompress(out.read_bytes()))
    origin = doc["otherData"]["origin_ns"]
    untraced = [e for e in doc["traceEvents"] if e.get("name", "").startswith("untraced")]
    assert [(origin + round(e["ts"] * 1000), round(e["dur"] * 1000)) for e in untraced] == [
        (WINDOWS[0][1], WINDOWS[1][0] - WINDOWS[0][1])
    ]
    (job,) = doc["otherData"]["jobs"]
    assert job["captured_ns"] == 10 * S
