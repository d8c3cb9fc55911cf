"""Every advice rule read a time chunk at a time gives the findings of one whole read,
on real traces stored as a collector stores them: two processes of one job in a
compacted lake, and another job's log; chunks small enough that calls, ranges, steps and
gaps fall on both sides of their boundaries. (The figures themselves are pinned against
the whole-process rules by tests/unit/test_golden_outputs.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.traces import shared_traces
from tfprof.collector.advice import RULE_NAMES, advise
from tfprof.collector.advice.base import Finding
from tfprof.collector.lake.location import lake_of
from tfprof.collector.lake.publish import compact_data_dir
from tfprof.collector.lake.reader import open_jobs
from tfprof.collector.lake.segments import collector_id
from tfprof.collector.read import time_chunks
from tfprof.collector.read.lake_catalog import catalog
from tfprof.collector.read.trace_job import job_from_trace
from tfprof.collector.store import Store
from tfprof.collector.store.importer import import_files
from tfprof.collector.timeline.prepare import TimeWindow

from .stored_jobs import catalog_of

KINETO = ("kineto-hta/simple_add.json.gz", "kineto-hta/event_sync_multi_stream.json.gz")
TF = ("tf-timeline-ikhlestov/GPU_timeline_02_step_0.json",)
HOST_RULES = {"launch-bound", "host-stalls", "sync-per-step", "memory-capacity"}


@pytest.fixture
def dirs(tmp_path: Path) -> list[str]:
    traces = shared_traces()
    a, b = tmp_path / "a", tmp_path / "b"
    import_files(Store(a, fsync=False), [traces / f for f in KINETO], "kineto",
                 as_steps=False, run_id="k-r1")  # fmt: skip
    import_files(Store(b, fsync=False), [traces / f for f in TF], "tf",
                 as_steps=True, run_id="t-r1")  # fmt: skip
    _done, failed = compact_data_dir(a, lake_of(a), collector_id(a))
    assert not failed
    return [str(a), str(b)]


def _advise(dirs: list[str], window: TimeWindow, rules: list[str] | None = None) -> list[Finding]:
    return advise(catalog(open_jobs(dirs).jobs, window), rules)[1]


@pytest.mark.parametrize(("windowed", "chunk"), [(False, 97), (True, 1000), (True, 61)])
def test_chunked_reads_give_one_whole_reads_findings(
    dirs: list[str], windowed: bool, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    window = TimeWindow()
    if windowed:  # the middle 80% of the first job's time
        read, _ = advise(catalog(open_jobs(dirs[:1]).jobs, TimeWindow()), ["gpu-idle"])
        cut = (read.end_ns - read.start_ns) // 10
        window = TimeWindow(read.start_ns + cut, read.end_ns - cut)
    monkeypatch.setattr(time_chunks, "CHUNK_ROWS", 1 << 30)  # every process in one chunk
    expected = _advise(dirs, window)
    rules = {f.rule for f in expected}
    assert rules - HOST_RULES  # the traces trigger GPU rules, and host rules unwindowed
    assert windowed or rules & HOST_RULES
    monkeypatch.setattr(time_chunks, "CHUNK_ROWS", chunk)
    assert _advise(dirs, window) == expected
    choices = [[r] for r in sorted(HOST_RULES)] + [["gpu-idle", "launch-bound"], list(RULE_NAMES)]
    for chosen in choices:
        assert _advise(dirs, window, chosen) == [f for f in expected if f.rule in chosen]


def test_trace_files_chunked_give_the_whole_reads_findings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    jobs = [job_from_trace(shared_traces() / f) for f in KINETO]
    monkeypatch.setattr(time_chunks, "CHUNK_ROWS", 1 << 30)
    _, expected = advise(catalog_of(jobs))
    assert {f.rule for f in expected} & HOST_RULES
    monkeypatch.setattr(time_chunks, "CHUNK_ROWS", 89)
    assert advise(catalog_of(jobs))[1] == expected
