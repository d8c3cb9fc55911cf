"""The host rules on host rows chosen process by process (``advice.host_rows``, what
``advise`` runs) give exactly the findings of the whole host side, on real traces stored
as a collector stores them: two processes of one job in a compacted lake, and another
job's log, read one process at a time."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from tests.traces import shared_traces
from tfprof.collector.advice import HOST_RULES, HostRows, advise
from tfprof.collector.analysis.records import ProcessHost, RecordSet, prepare
from tfprof.collector.importer import import_files
from tfprof.collector.lake.compact import compact_data_dir
from tfprof.collector.lake.location import lake_of
from tfprof.collector.lake.reader import open_jobs
from tfprof.collector.lake.segments import collector_id
from tfprof.collector.store import Store

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


def _lake(dirs: list[Path], since: int | None, until: int | None, select: HostRows | None
          ) -> RecordSet:  # fmt: skip
    jobs = open_jobs([str(d) for d in dirs]).jobs
    return prepare(jobs, since, until, select=select)


def _window(dirs: list[Path]) -> tuple[int, int]:
    whole = _lake(dirs, None, None, None)
    kineto = whole.job == 0
    first, last = int(whole.start[kineto].min()), int(whole.end[kineto].max())
    return first + (last - first) // 10, last - (last - first) // 10


@pytest.mark.parametrize("windowed", [False, True])
def test_host_rows_give_the_whole_host_sides_findings(dirs: list[Path], windowed: bool) -> None:
    since, until = _window(dirs) if windowed else (None, None)
    whole = _lake(dirs, since, until, None)
    expected = advise(whole)
    assert {f.rule for f in expected} & HOST_RULES  # the traces trigger host rules
    rows = HostRows()
    chosen = _lake(dirs, since, until, rows)
    assert 0 < len(chosen.host) < len(whole.host) // 2  # most host rows are left out
    assert advise(chosen, host_rows=rows) == expected
    for rule in sorted(HOST_RULES):
        rows = HostRows()
        chosen = _lake(dirs, since, until, rows)
        assert advise(chosen, [rule], rows) == [f for f in expected if f.rule == rule], rule


def test_without_step_ranges_outermost_ranges_with_sync_calls_are_kept(dirs: list[Path]) -> None:
    """Renamed so that no range is a step: sync-per-step falls back on outermost ranges,
    and those the chosen rows keep give the same findings."""
    whole = _lake(dirs, None, None, None)
    names = tuple(map(_no_step, whole.names))
    expected = advise(dataclasses.replace(whole, names=names), ["sync-per-step"])
    assert expected and expected[0].evidence["steps_from"] == "outermost host ranges"
    rows = HostRows()

    def renamed(p: ProcessHost) -> np.ndarray:
        return rows(dataclasses.replace(p, names=tuple(map(_no_step, p.names))))

    chosen = prepare(open_jobs([str(d) for d in dirs]).jobs, select=renamed)
    assert len(chosen.host) < len(whole.host) // 2
    got = advise(dataclasses.replace(chosen, names=names), ["sync-per-step"], rows)
    assert got == expected


def _no_step(name: str) -> str:
    return name.replace("Step", "Stop").replace("step", "stop")


def test_trace_files_give_the_whole_host_sides_findings() -> None:
    """Trace files (read whole, not from the lake) go through the same choice."""
    from tfprof.collector.analysis.tracefile import job_from_trace

    jobs = [job_from_trace(shared_traces() / f) for f in KINETO]
    expected = advise(prepare(jobs))
    assert {f.rule for f in expected} & HOST_RULES
    rows = HostRows()
    assert advise(prepare(jobs, select=rows), host_rows=rows) == expected
