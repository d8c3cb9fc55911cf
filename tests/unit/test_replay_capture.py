"""The replay source honours capture windows (sources/replay.py): only records whose
replayed start falls inside a window reach the sink; at speed 1 replayed time is the
wall clock, so a window set ahead catches exactly the records replayed in it."""

from __future__ import annotations

import array
import itertools
import time

from tests.traces import needs_traces, shared_traces
from tests.unit.replay_sink import FakeSink
from tfprof.agent.inprocess.sources.replay import ReplaySource
from tfprof.agent.inprocess.sources.replay_plan import LOOP_GAP_NS
from tfprof.core.records import COLUMNS, RecordTable
from tfprof.readers import load_trace

MS = 10**6


def chunk(starts: list[int]) -> list[array.array[int]]:
    table = RecordTable()
    for s in starts:
        table.add_kernel(start_ns=s, end_ns=s + 1, device=0, stream=1, name=0)
    return list(table.columns)


def starts_of(columns: list[array.array[int]] | None) -> list[int]:
    return [] if columns is None else list(columns[COLUMNS.index("start_ns")])


def test_windows_cut_chunks_at_record_starts() -> None:
    source = ReplaySource("unused.json")
    columns = chunk(list(range(0, 100, 10)))
    assert starts_of(source._captured(columns)) == starts_of(columns)  # always: all of it
    source._windows = []  # armed idle, as start(capturing=False) leaves it
    assert source._captured(columns) is None
    source.set_capturing(True, 25)
    source.set_capturing(True, 27)  # already open: no new window
    source.set_capturing(False, 50)
    source.set_capturing(False, 55)  # already closed: nothing
    source.set_capturing(True, 80)
    assert starts_of(source._captured(columns)) == [30, 40, 80, 90]
    out = source._captured(columns)
    assert out is not None and all(len(col) == 4 for col in out)  # every column cut alike
    source.set_capturing(False, 85)
    assert starts_of(source._captured(chunk([60, 70]))) == []
    assert source._captured(chunk([51, 79])) is None


@needs_traces
def test_at_speed_one_only_records_inside_the_window_are_replayed() -> None:
    path = str(shared_traces() / "tf-timeline-ikhlestov/GPU_timeline_03_merged_5_runs.json")
    trace = load_trace(path)
    starts = sorted(trace.column("start_ns"))
    # The widest gap between consecutive replayed records, loop gaps included.
    widest = max([b - a for a, b in itertools.pairwise(starts)] + [LOOP_GAP_NS])
    widest += trace.span_ns - (starts[-1] - starts[0])
    sink = FakeSink()
    source = ReplaySource(path, speed=1.0, repeat=12)  # ~1.7 s of dense activity
    source.start(sink, capturing=False)
    window = (time.time_ns() + 500 * MS, time.time_ns() + 1100 * MS)
    source.set_capturing(True, window[0])  # announced ahead, as the hook's lead does
    source.set_capturing(False, window[1])
    source.stop(time.monotonic() + 30)
    got = sorted(row["start_ns"] for row in sink.rows())
    assert got, "no record inside the window"
    assert all(window[0] <= t < window[1] for t in got)
    # Dense trace: the window's first and last records are near its edges.
    assert got[0] - window[0] <= widest and window[1] - got[-1] <= widest
    assert sink.warnings == []
