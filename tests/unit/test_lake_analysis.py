"""Summaries and advice read from the lake (lake/reader.py: segments and log tails, a
chunk at a time) equal the ones read from the logs loaded whole, both through the read
engine, on real traces stored the way a collector stores them: log tails, compacted
segments, both, and several data dirs read as one."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.traces import shared_traces
from tfprof.collector.advice import RULE_NAMES, advise
from tfprof.collector.analysis.view_table import VIEW_NAMES, read_view_report
from tfprof.collector.cli import main
from tfprof.collector.lake.lake_stream import LakeStream
from tfprof.collector.lake.location import lake_of
from tfprof.collector.lake.publish import compact_data_dir
from tfprof.collector.lake.reader import open_jobs
from tfprof.collector.lake.segments import collector_id
from tfprof.collector.read.lake_catalog import Catalog, catalog
from tfprof.collector.store import Store
from tfprof.collector.store.importer import import_files
from tfprof.collector.timeline.prepare import TimeWindow

from .stored_jobs import catalog_of

KINETO = ("kineto-hta/simple_add.json.gz", "kineto-hta/event_sync_multi_stream.json.gz")
TF = ("tf-timeline-ikhlestov/GPU_timeline_02_step_0.json",
      "tf-timeline-ikhlestov/GPU_timeline_02_step_1.json")  # fmt: skip


def _store(data_dir: Path, job: str, files: tuple[str, ...], as_steps: bool) -> None:
    traces = shared_traces()
    import_files(Store(data_dir, fsync=False), [traces / f for f in files], job,
                 as_steps=as_steps, run_id=f"{job}-r1")  # fmt: skip


def _compact(data_dir: Path) -> None:
    _done, failed = compact_data_dir(data_dir, lake_of(data_dir), collector_id(data_dir))
    assert not failed


@pytest.fixture
def two_dirs(tmp_path: Path) -> list[Path]:
    """Two collectors' data dirs: Kineto traces as two processes of one job, and TF
    timeline steps of another job; the first compacted, the second only logs."""
    a, b = tmp_path / "a", tmp_path / "b"
    _store(a, "kineto", KINETO, as_steps=False)
    _store(b, "tf", TF, as_steps=True)
    _compact(a)
    return [a, b]


def _whole(dirs: list[Path], since: int | None = None, until: int | None = None) -> Catalog:
    """The data dirs' logs loaded whole (``Store.load_jobs``), as the read engine reads them."""
    jobs = [job for d in dirs for job in Store(d, create=False).load_jobs()]
    return catalog_of(jobs, since, until)


def _from_lake(dirs: list[Path], since: int | None = None, until: int | None = None) -> Catalog:
    """The data dirs as ``summary --data-dir`` reads them: segments and log tails."""
    stored = open_jobs([str(d) for d in dirs])
    assert all(isinstance(s, LakeStream) for j in stored.jobs for s in j.streams)
    return catalog(stored.jobs, TimeWindow(since, until))


def test_every_view_equals_the_whole_load(two_dirs: list[Path]) -> None:
    for name in VIEW_NAMES:
        ours = read_view_report(name, _from_lake(two_dirs))
        theirs = read_view_report(name, _whole(two_dirs))
        # the traces hold no memory records, and no NCCL kernel
        assert ours.rows or name in ("memory", "collectives"), name
        assert (ours.rows, ours.notes, ours.jobs) == (theirs.rows, theirs.notes, theirs.jobs), name
        assert (ours.start_ns, ours.end_ns) == (theirs.start_ns, theirs.end_ns), name


def test_every_rule_equals_the_whole_load_in_a_window(two_dirs: list[Path]) -> None:
    # The jobs ran years apart: a window inside the first one (its GPU records' span).
    kineto = read_view_report("kernels", _whole(two_dirs[:1]))
    first, last = kineto.start_ns, kineto.end_ns
    since, until = first + (last - first) // 10, last - (last - first) // 10
    # The logs loaded whole, and the lake (segments, log tails) read a chunk at a time.
    expected = advise(_whole(two_dirs, since, until))[1]
    assert expected
    lake = _from_lake(two_dirs, since, until)
    assert advise(lake)[1] == expected
    for rule in RULE_NAMES:
        assert advise(lake, [rule])[1] == [f for f in expected if f.rule == rule], rule


def test_a_compacted_data_dir_reads_as_its_logs(two_dirs: list[Path]) -> None:
    logs_only = {n: read_view_report(n, _from_lake(two_dirs)).rows for n in VIEW_NAMES}
    _compact(two_dirs[1])
    compacted = {n: read_view_report(n, _from_lake(two_dirs)).rows for n in VIEW_NAMES}
    for name in VIEW_NAMES:
        assert compacted[name] == logs_only[name], name
    assert compacted["steps"] and compacted["op"]


def test_summary_and_advise_take_several_data_dirs(
    two_dirs: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    dirs = [arg for d in two_dirs for arg in ("--data-dir", str(d))]
    assert main(["summary", *dirs, "--view", "jobs", "--format", "csv",
                 "--select", "job,kernels"]) == 0  # fmt: skip
    out = capsys.readouterr().out.splitlines()
    whole = read_view_report("jobs", _whole(two_dirs)).rows
    assert out == ["job,kernels"] + [f"{r.job},{r.kernels}" for r in whole]
    assert main(["advise", *dirs, "--job", "tf", "--since", "+1ms"]) == 0
    assert main(["summary", "--data-dir", str(two_dirs[0]), "--job", "nope"]) == 2
    assert "no such job: nope" in capsys.readouterr().err


def test_calls_counted_in_open_steps_equal_a_pass_per_step() -> None:
    """sync-per-step's count (``step_calls._count``): each call, fed in start order a
    chunk at a time, counts in every open step holding its start (edges included)."""
    import numpy as np

    from tfprof.collector.read.step_calls import Steps, _count

    rng = np.random.default_rng(7)
    step_start = rng.integers(0, 1_000, 40)
    step_end = step_start + rng.integers(0, 200, 40)  # steps overlap
    call_start = np.sort(np.concatenate([rng.integers(0, 1_200, 300), step_end[:5]]))
    call_end = call_start + rng.integers(0, 50, call_start.shape[0])
    steps = Steps(open=(step_start, step_end, np.zeros(40, dtype=np.int64)))
    for lo in range(0, call_start.shape[0], 23):
        part = slice(lo, lo + 23)
        name = np.ones(call_start[part].shape[0], dtype=np.int64)
        _count(steps, call_start[part], call_end[part], name)
    hits = [
        (call_start >= a) & (call_start <= b) for a, b in zip(step_start, step_end, strict=True)
    ]
    assert steps.open[2].tolist() == [int(h.sum()) for h in hits]
    inside = np.logical_or.reduce(hits)
    assert steps.wait == int((call_end - call_start)[inside].sum())
    assert steps.names == {1: int(inside.sum())}
