"""Correctness anchor: our kernel totals and per-stream busy time on the Kineto traces in
../shared/data/traces agree with HolisticTraceAnalysis (HTA) on the original files.

Ours come from the views as ``summary FILE`` reads them (the file imported into a lake
in memory, read through the read engine) and, per launch, the engine's own launch links
(``read.host_launches``); HTA's from its TraceAnalysis on a copy of each file.
Skipped where HTA is not installed (``pip install -e '.[hta]'``).

Known differences, excluded from the comparison:
- HTA lists Kineto ``cuda_sync`` events that name a stream ("Stream Wait Event") among
  the GPU kernels; we import every ``cuda_sync`` as a SYNC record (a wait, not work), so
  it is not in our kernels view.
- HTA's launch statistics cover every call with a GPU partner (kernels, copies and
  memsets with ``include_memory_events``); the launch view is per kernel name, so the
  per-name comparison leaves copies and memsets out (the per-correlation one does not).
- HTA's idle time per stream is the sum of gaps between consecutive events on the stream
  (it does not count the Stream Wait Event); we compute busy time as the union of
  intervals; busy = span - idle (span without the wait event) ties the two.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.traces import shared_traces
from tests.unit.launch_rows import LaunchRows, SweptNeed
from tfprof.collector.analysis.view_table import read_view_report
from tfprof.collector.read import engine
from tfprof.collector.read.host_launches import ChunkLaunches
from tfprof.collector.read.lake_catalog import Catalog, catalog
from tfprof.collector.read.time_chunks import Chunk
from tfprof.collector.read.trace_files import read_trace_files
from tfprof.collector.timeline.prepare import TimeWindow

hta_trace_analysis = pytest.importorskip("hta.trace_analysis")

KINETO = ["simple_add.json.gz", "event_sync_multi_stream.json.gz"]
SYNC_NAMES = {"Stream Wait Event", "Event Sync", "Context Sync", "Stream Sync"}


def _close(ours: float, theirs: float) -> bool:
    return abs(ours - theirs) <= 0.01 * max(abs(theirs), 1e-9)


def _catalog(path: Path) -> Catalog:
    """The file as ``summary FILE`` reads it."""
    return catalog(read_trace_files([path]).jobs, TimeWindow())


def _launch_figures(
    names: Sequence[str], settled: Chunk, h: ChunkLaunches, i: int, row: int
) -> tuple[int, int, int, str] | None:
    """A linked GPU record's call duration, launch latency, queue depth and name (ns,
    ns, records), as the read engine's launch links find them; None: unlinked."""
    if h.call[i] < 0:
        return None
    name = names[int(settled["name"][row])]
    return int(h.call_duration[i]), int(h.latency[i]), int(h.queue[i]), name


# Per linked GPU record, by correlation id: ``_launch_figures``.
_LAUNCHES = SweptNeed(LaunchRows("correlation", _launch_figures))


def _hta(path: Path, tmp_path: Path) -> Any:
    trace_dir = tmp_path / path.name.split(".")[0]
    trace_dir.mkdir()
    shutil.copy(path, trace_dir / path.name)  # HTA reads every trace file of a folder
    return hta_trace_analysis.TraceAnalysis(trace_dir=str(trace_dir))


@pytest.mark.parametrize("filename", KINETO)
def test_kernel_totals_and_stream_busy_time_agree_with_hta(filename: str, tmp_path: Path) -> None:
    path = shared_traces() / "kineto-hta" / filename
    if not path.is_file():
        pytest.skip(f"{path} not found (set TFPROF_SHARED_DATA)")
    analysis = _hta(path, tmp_path)
    _, per_kernel = analysis.get_gpu_kernel_breakdown(
        visualize=False, duration_ratio=1.0, num_kernels=10_000, include_memory_kernels=True
    )
    idle, _ = analysis.get_idle_time_breakdown(visualize=False)
    cat = _catalog(path)

    # Kernels: every name, count-independent totals in us (Kineto durations are whole us).
    theirs = {
        row["name"]: float(row["sum (us)"])
        for _, row in per_kernel.iterrows()
        if row["kernel_type"] == "COMPUTATION" and row["name"] not in SYNC_NAMES
    }
    ours = {k.name: k.total_us for k in read_view_report("kernels", cat).rows}
    assert set(ours) == set(theirs)
    for name, total in theirs.items():
        assert _close(ours[name], total), (name, ours[name], total)

    # Copies: HTA names them as Kineto does, "Memcpy HtoD (Pageable -> Device)".
    copies = {
        row["name"]: float(row["sum (us)"])
        for _, row in per_kernel.iterrows()
        if str(row["name"]).startswith("Memcpy")
    }
    for row in read_view_report("memcpy", cat).rows:
        label = f"Memcpy {row.kind} ({row.src.capitalize()} -> {row.dst.capitalize()})"
        assert _close(row.total_us, copies[label]), (label, row.total_us, copies[label])

    # Streams: busy = span - idle, with HTA's idle summed over its categories.
    trace = analysis.t.get_trace(0)
    names = analysis.t.symbol_table.get_sym_table()
    gpu = trace[(trace["stream"] >= 0) & ~trace["name"].map(lambda i: names[i] in SYNC_NAMES)]
    their_idle = idle.groupby("stream")["idle_time"].sum().to_dict()
    compared = 0
    for stream_row in read_view_report("streams", cat).rows:
        if stream_row.busy_us == 0:  # a track of host waits only (context-wide syncs)
            continue
        events = gpu[gpu["stream"] == stream_row.stream]
        span = float((events["ts"] + events["dur"]).max() - events["ts"].min())
        their_busy = span - float(their_idle[stream_row.stream])
        assert _close(stream_row.busy_us, their_busy), (
            stream_row.stream,
            stream_row.busy_us,
            their_busy,
        )
        compared += 1
    assert compared == len(their_idle)


@pytest.mark.parametrize("filename", KINETO)
def test_launch_statistics_agree_with_hta_per_correlation(filename: str, tmp_path: Path) -> None:
    """HTA's CUDA kernel launch statistics (cpu_duration, launch_delay per correlation) and
    queue length against ours (the read engine's launch links, what the ``launch`` view
    adds up), launch by launch, then per kernel name as the launch view shows them."""
    path = shared_traces() / "kineto-hta" / filename
    if not path.is_file():
        pytest.skip(f"{path} not found (set TFPROF_SHARED_DATA)")
    analysis = _hta(path, tmp_path)
    theirs = analysis.get_cuda_kernel_launch_stats(
        ranks=[0], include_memory_events=True, visualize=False
    )[0]
    cat = _catalog(path)
    _, (found,) = engine.read(cat, [_LAUNCHES])
    ours = {c: (cpu / 1000, lat / 1000, q, name) for c, (cpu, lat, q, name) in found.items()}
    assert len(theirs) > 0
    for _, row in theirs.iterrows():
        cpu, latency, _, _ = ours[int(row["correlation"])]
        assert _close(cpu, float(row["cpu_duration"])), (row["correlation"], cpu, row)
        assert abs(latency - float(row["launch_delay"])) < 1e-3, (row["correlation"], latency)

    # Queue length: HTA counts +1 at each launch call, -1 at each GPU start, per stream;
    # at a launch it includes the launched record itself. Where a record of the stream
    # starts at the very instant of the call, HTA's order is its sort's: not compared.
    series = analysis.get_queue_length_time_series(ranks=[0])[0]
    trace = analysis.t.get_trace(0)
    own = trace[["correlation", "stream"]].rename(columns={"stream": "own_stream"})
    joined = series.join(own, how="left")
    at_launch = joined[joined["own_stream"] == -1]
    starts = set(zip(trace["stream"].tolist(), trace["ts"].tolist(), strict=True))
    compared = 0
    for corr, length, ts, stream in zip(
        at_launch["correlation"],
        at_launch["queue_length"],
        at_launch["ts"],
        at_launch["stream"],
        strict=True,
    ):
        if int(corr) not in ours or (stream, ts) in starts:
            continue
        assert ours[int(corr)][2] + 1 == int(length), (corr, ours[int(corr)][2], length)
        compared += 1
    assert compared > 0

    # The view: per kernel name, the mean latency and CPU time of HTA's rows.
    names = {c: name for c, (*_, name) in ours.items()}
    kernels_only = theirs[theirs["correlation"].map(lambda c: int(c) in names)]
    by_name = kernels_only.assign(name=kernels_only["correlation"].map(lambda c: names[int(c)]))
    view = {r.name: r for r in read_view_report("launch", cat).rows}
    for name, group in by_name.groupby("name"):
        if name not in view:  # a copy or memset: HTA lists them, the view is per kernel
            continue
        assert view[name].kernels == len(group)
        assert _close(view[name].latency_avg_us, float(group["launch_delay"].mean()))
        assert _close(view[name].launch_cpu_us, float(group["cpu_duration"].sum()))
