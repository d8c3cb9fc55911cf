"""The host rules on a host side streamed in batches (``analysis.host_pass`` feeding
``advice.host_rows``, what ``advise`` runs) give exactly the findings of the whole host
side, on real traces stored as a collector stores them: two processes of one job in a
compacted lake, and another job's log, read one process at a time; batches small enough
that calls, ranges and steps fall on both sides of their boundaries."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from tests.traces import shared_traces
from tfprof.collector import advice
from tfprof.collector.advice import HOST_RULES, RULE_NAMES, HostRows, advise, advise_gpu_first
from tfprof.collector.analysis import host_pass
from tfprof.collector.analysis.records import ProcessHost, RecordSet, prepare, prepare_gpu_first
from tfprof.collector.jobdata import StreamData
from tfprof.collector.lake.location import lake_of
from tfprof.collector.lake.publish import compact_data_dir
from tfprof.collector.lake.reader import open_jobs
from tfprof.collector.lake.segments import collector_id
from tfprof.collector.store import Store
from tfprof.collector.store.importer import import_files
from tfprof.core.records import RecordKind

KINETO = ("kineto-hta/simple_add.json.gz", "kineto-hta/event_sync_multi_stream.json.gz")
TF = ("tf-timeline-ikhlestov/GPU_timeline_02_step_0.json",)


@pytest.fixture
def dirs(tmp_path: Path) -> list[Path]:
    traces = shared_traces()
    a, b = tmp_path / "a", tmp_path / "b"
    import_files(Store(a, fsync=False), [traces / f for f in KINETO], "kineto",
                 as_steps=False, run_id="k-r1")  # fmt: skip
    import_files(Store(b, fsync=False), [traces / f for f in TF], "tf",
                 as_steps=True, run_id="t-r1")  # fmt: skip
    _done, failed = compact_data_dir(a, lake_of(a), collector_id(a))
    assert not failed
    return [a, b]


def _lake(dirs: list[Path], since: int | None, until: int | None, select: HostRows | None,
          batch_rows: int | None = None) -> RecordSet:  # fmt: skip
    jobs = open_jobs([str(d) for d in dirs]).jobs
    return prepare(jobs, since, until, select=select, batch_rows=batch_rows)


def _window(dirs: list[Path]) -> tuple[int, int]:
    whole = _lake(dirs, None, None, None)
    kineto = whole.job == 0
    first, last = int(whole.start[kineto].min()), int(whole.end[kineto].max())
    return first + (last - first) // 10, last - (last - first) // 10


@pytest.mark.parametrize(("windowed", "batch_rows"), [(False, None), (True, None), (False, 97),
                                                     (True, 1000)])  # fmt: skip
def test_host_rows_give_the_whole_host_sides_findings(
    dirs: list[Path], windowed: bool, batch_rows: int | None
) -> None:
    since, until = _window(dirs) if windowed else (None, None)
    whole = _lake(dirs, since, until, None)
    expected = advise(whole)
    assert {f.rule for f in expected} & HOST_RULES  # the traces trigger host rules
    rows = HostRows()
    chosen = _lake(dirs, since, until, rows, batch_rows)
    assert len(chosen.host) < len(whole.host) // 100  # no API call or range is kept
    assert chosen.calls is not None and 0 < len(chosen.calls.name) < len(whole.host)
    assert advise(chosen, host_rows=rows) == expected
    for rule in sorted(HOST_RULES):
        rows = HostRows()
        chosen = _lake(dirs, since, until, rows, batch_rows)
        assert advise(chosen, [rule], rows) == [f for f in expected if f.rule == rule], rule


@pytest.mark.parametrize(("windowed", "concurrent"), [(False, True), (True, True),
                                                     (False, False), (True, False)])  # fmt: skip
def test_gpu_rules_first_then_the_host_pass_give_the_same_findings(
    dirs: list[Path], windowed: bool, concurrent: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What ``advise`` runs: the GPU rules on the GPU table alone, then the host side
    streamed for the host rules; every rule, one rule, GPU and host rules mixed. The GPU
    rules run while the host side is read, or (a larger table) before it."""
    if not concurrent:
        monkeypatch.setattr(advice, "CONCURRENT_GPU_ROWS", 0)
    since, until = _window(dirs) if windowed else (None, None)
    expected = advise(_lake(dirs, since, until, None))
    assert {f.rule for f in expected} & HOST_RULES and {f.rule for f in expected} - HOST_RULES
    for rules in (None, ["host-stalls"], ["gpu-idle", "launch-bound"], list(RULE_NAMES)):
        table = prepare_gpu_first(open_jobs([str(d) for d in dirs]).jobs, since, until)
        assert len(table.rs.host) == 0 and table.rs.calls is None  # host side not read yet
        got = advise_gpu_first(table, rules)
        assert got == [f for f in expected if rules is None or f.rule in rules], rules


@pytest.mark.parametrize("by_id", [True, False])
def test_records_are_linked_as_from_the_whole_host_side(
    dirs: list[Path], by_id: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each GPU record's call (its duration and name) and launch latency, in batches;
    calls found in an array indexed by correlation id, and by binary search."""
    if not by_id:
        monkeypatch.setattr(host_pass, "DENSE_IDS", 0)
        monkeypatch.setattr(host_pass, "DENSE_MIN_IDS", 0)
    whole = _lake(dirs, None, None, None)
    streamed = _lake(dirs, None, None, HostRows(), batch_rows=61)
    assert (streamed.api >= 0).tolist() == (whole.api >= 0).tolist()
    linked = whole.api >= 0
    assert linked.sum() > 100
    calls = streamed.launch_calls()
    h = whole.launch_calls()
    assert calls.duration[streamed.api[linked]].tolist() == h.duration[whole.api[linked]].tolist()
    names = [streamed.names[n] for n in calls.name[streamed.api[linked]].tolist()]
    assert names == [whole.names[n] for n in h.name[whole.api[linked]].tolist()]
    assert streamed.latency.tolist() == whole.latency.tolist()


def test_without_step_ranges_outermost_ranges_with_sync_calls_are_kept(dirs: list[Path]) -> None:
    """Renamed so that no range is a step: sync-per-step falls back on outermost ranges,
    and those the chosen rows keep give the same findings."""
    whole = _lake(dirs, None, None, None)
    expected = advise(_renamed(whole), ["sync-per-step"])
    assert expected and expected[0].evidence["steps_from"] == "outermost host ranges"
    for batch_rows in (None, 113):
        rows = _Renamed()
        jobs = open_jobs([str(d) for d in dirs]).jobs
        chosen = prepare(jobs, select=rows, batch_rows=batch_rows)
        got = advise(_renamed(chosen), ["sync-per-step"], rows)
        assert got == expected


def _renamed(rs: RecordSet) -> RecordSet:
    return dataclasses.replace(rs, names=tuple(map(_no_step, rs.names)))


class _Renamed(HostRows):
    def __call__(self, rows: ProcessHost) -> np.ndarray:
        return super().__call__(dataclasses.replace(rows, names=tuple(map(_no_step, rows.names))))


def _no_step(name: str) -> str:
    return name.replace("Step", "Stop").replace("step", "stop")


def test_trace_files_give_the_whole_host_sides_findings() -> None:
    """Trace files (read whole, not from the lake) go through the same choice."""
    from tfprof.collector.analysis.tracefile import job_from_trace

    jobs = [job_from_trace(shared_traces() / f) for f in KINETO]
    expected = advise(prepare(jobs))
    assert {f.rule for f in expected} & HOST_RULES
    for batch_rows in (None, 89):
        rows = HostRows()
        assert advise(prepare(jobs, select=rows, batch_rows=batch_rows), host_rows=rows) == expected


def test_a_launch_latency_over_two_seconds_widens_the_latency_column() -> None:
    """Latencies are held as int32 while they fit: a kernel starting 3 s after its call
    ended (a later process's) gets its whole latency, as linking the whole host side."""
    from tests.unit.analysis_data import job, kernel, stream

    def launched(pid: int, wait_us: int) -> StreamData:
        call = {"kind": 5, "start": 0, "dur": 5, "correlation": 9, "name": 2}
        return stream([call, kernel(5 + wait_us, 10, correlation=9)], pid=pid)

    jobs = [job("a", launched(1, 7), launched(2, 3_000_000))]
    whole = prepare(jobs)
    streamed = prepare(jobs, select=HostRows())
    assert streamed.latency.tolist() == whole.latency.tolist() == [7_000, 3_000_000_000]


def test_a_launch_call_over_two_seconds_widens_the_calls_duration_column() -> None:
    """The linked calls' durations are held as int32 while they fit: a process whose
    call lasts 3 s (after one whose call fits) gets its whole duration, as linking the
    whole host side, and launch-bound sums them exactly."""
    from tests.unit.analysis_data import job, kernel, stream

    def launched(pid: int, call_us: int) -> StreamData:
        call = {"kind": 5, "start": 0, "dur": call_us, "correlation": 9, "name": 2}
        return stream([call, kernel(call_us, 10, correlation=9)], pid=pid)

    jobs = [job("a", launched(1, 7), launched(2, 3_000_000))]
    whole = prepare(jobs)
    streamed = prepare(jobs, select=HostRows())
    want = [7_000, 3_000_000_000]
    for rs in (whole, streamed):
        calls = rs.launch_calls()
        assert calls.duration[rs.api].tolist() == want
    assert streamed.launch_calls().duration.dtype == np.int64


def test_an_error_on_the_evidence_thread_reaches_the_reader(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``HostRows`` gathers its evidence on a thread of its own: what fails there is
    raised by the host pass, never lost with the thread."""
    from tests.unit.analysis_data import job, kernel, stream

    def broken(*_: object) -> None:
        raise RuntimeError("evidence failed")

    monkeypatch.setattr(HostRows, "_in_gaps", broken)
    call = {"kind": 5, "start": 0, "dur": 5, "correlation": 9, "name": 2}
    jobs = [job("a", stream([call, kernel(10, 10, correlation=9)], pid=1))]
    with pytest.raises(RuntimeError, match="evidence failed"):
        prepare(jobs, select=HostRows())


@pytest.mark.parametrize("order", ["in start order", "last first"])
def test_a_range_holds_the_calls_inside_it_in_any_row_order(dirs: list[Path], order: str) -> None:
    """Without step ranges, the outermost ranges holding a synchronising call are the
    steps: whichever order a batch's ranges come in (searched for in order, or not)."""
    jobs = open_jobs([str(d) for d in dirs]).jobs
    rows = HostRows()
    rows.start(prepare_gpu_first(jobs).rs)
    names = ["", "cudaStreamSynchronize", "outer", "inner", "idle"]
    # Three calls; "outer" holds them all, "inner" (inside it) one, "idle" none.
    calls: dict[str, list[int]] = {
        "kind": [RecordKind.API] * 3, "start": [100, 300, 500], "end": [110, 310, 510],
        "name": [1, 1, 1],
    }  # fmt: skip
    ranges: dict[str, list[int]] = {
        "kind": [RecordKind.MARKER] * 3, "start": [50, 90, 600], "end": [1000, 200, 700],
        "name": [2, 3, 4],
    }  # fmt: skip
    for batch in (calls, ranges):
        cols = {c: np.array(v if order == "in start order" else v[::-1], dtype=np.int64)
                for c, v in batch.items()}  # fmt: skip
        n = cols["kind"].shape[0]
        cols |= {"job": np.zeros(n, np.int32), "process": np.zeros(n, np.int32),
                 "thread": np.ones(n, np.int64)}  # fmt: skip
        rows(ProcessHost(cols, names))
    rows.end_process()
    rows.end()
    (found,) = rows.step_syncs()
    assert found.per_step.tolist() == [3]
