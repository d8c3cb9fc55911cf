"""timeline_parts: a timeline merged and rendered one task (process) at a time.

Stored streams read from the lake are loaded only while their task's part is in use;
the parts collected, and every format rendered from them, say what a merge of the logs
loaded whole says."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest

from tfprof.collector.export import FORMATS
from tfprof.collector.jobdata import RECORD_COLUMNS, JobData
from tfprof.collector.lake.lake_stream import LakeStream
from tfprof.collector.lake.location import lake_of
from tfprof.collector.lake.publish import compact_data_dir
from tfprof.collector.lake.reader import open_jobs
from tfprof.collector.lake.segments import collector_id
from tfprof.collector.store import Store
from tfprof.collector.store.importer import import_files
from tfprof.collector.timeline.build import GroupBy, build_timeline, timeline_parts
from tfprof.collector.timeline.model import TraceProcess, collect

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"
KINETO = ("kineto-hta/simple_add.json.gz", "kineto-hta/event_sync_multi_stream.json.gz")


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """One job of two processes (the Kineto traces), compacted into the data dir's lake."""
    store = Store(tmp_path, fsync=False)
    import_files(store, [TRACES / f for f in KINETO], "train", as_steps=False, run_id="r1")
    _done, failed = compact_data_dir(tmp_path, lake_of(tmp_path), collector_id(tmp_path))
    assert not failed
    return tmp_path


def _named(names: tuple[str, ...], ids: np.ndarray) -> list[str]:
    return [names[i] if i >= 0 else "" for i in ids.tolist()]


def _loaded(jobs: list[JobData]) -> list[int]:
    return [int(s.records["kind"].shape[0]) for j in jobs for s in j.streams]


def test_parts_hold_one_task_each_and_only_its_records_are_loaded(data_dir: Path) -> None:
    jobs = open_jobs([str(data_dir)]).jobs
    assert all(isinstance(s, LakeStream) for j in jobs for s in j.streams)
    parted = timeline_parts(jobs)
    assert _loaded(jobs) == [0, 0]  # the origin was found without loading anything
    with pytest.raises(RuntimeError):
        _ = parted.metadata  # complete only after the last part
    tasks, flows = [], 0
    for index, part in enumerate(parted.parts()):
        loaded = _loaded(jobs)
        assert loaded[index] > 0 and sum(loaded) == loaded[index]
        tasks.append({t.key.task_prefix for t in part.slices})
        # Flow ids go on across parts: this task's are the next ones, on both ends.
        ids = np.arange(flows + 1, flows + len(part.starts) + 1)
        assert np.array_equal(part.starts.id, ids) and np.array_equal(part.ends.id, ids)
        flows += len(part.starts)
        del part
    assert _loaded(jobs) == [0, 0]
    assert len(tasks) == 2 and all(len(t) == 1 for t in tasks) and tasks[0] != tasks[1]
    assert parted.metadata["host_side"]["flows"]["linked"] == flows > 0


@pytest.mark.parametrize("group_by", ["job", "gpu"])
def test_collected_parts_from_the_lake_equal_the_whole_load(
    data_dir: Path, group_by: GroupBy
) -> None:
    whole = build_timeline(Store(data_dir, create=False).load_jobs(), group_by=group_by)
    jobs = open_jobs([str(data_dir)]).jobs
    # A collected timeline refers to records released with their part: compare as it goes.
    parted = timeline_parts(jobs, group_by=group_by)
    slices = iter(whole.slices)
    procs: list[TraceProcess] = []
    for part in parted.parts():
        procs += part.processes
        for track in part.slices:
            theirs = next(slices)
            assert (track.name, track.pid, track.thread_ids) == (theirs.name, theirs.pid,
                                                                 theirs.thread_ids)  # fmt: skip
            for column in ("start_ns", "duration_ns", "lane", "kind"):
                assert np.array_equal(getattr(track, column), getattr(theirs, column)), column
            # Every record column the formats write (launch geometry, registers, ...);
            # names and categories are string ids, compared as strings below; raw
            # starts differ by the clock shift the lake has already applied.
            for column in set(RECORD_COLUMNS) - {"name", "category", "start_ns"}:
                assert np.array_equal(track.column(column), theirs.column(column)), column
            # The lake interns names in its own order: compare them as strings.
            assert _named(part.names, track.name_id) == _named(whole.names, theirs.name_id)
            if theirs.op_id is not None:
                assert track.op_id is not None
                assert _named(part.names, track.op_id) == _named(whole.names, theirs.op_id)
        del part
    assert next(slices, None) is None
    assert tuple(procs) == whole.processes
    assert parted.origin_ns == whole.origin_ns
    # The clocks too: the lake stores times already shifted, and its streams say by how
    # much (``applied_shifts_ns``), so the alignment reads as the whole load's.
    assert [c["record_shift_ns"] for c in parted.metadata["clocks"]] != [0, 0]
    assert dict(parted.metadata) == dict(whole.metadata)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_every_format_renders_parts_as_it_renders_the_whole(
    data_dir: Path, tmp_path: Path, fmt: str
) -> None:
    jobs = Store(data_dir, create=False).load_jobs()
    whole, parted = io.BytesIO(), io.BytesIO()
    FORMATS[fmt](build_timeline(jobs)).render(whole)
    FORMATS[fmt](timeline_parts(jobs)).render(parted)
    if fmt == "chrome":  # the same events and metadata; events in an order of their own
        a, b = json.loads(whole.getvalue()), json.loads(parted.getvalue())
        assert a["otherData"] == b["otherData"]
        key = lambda e: json.dumps(e, sort_keys=True)  # noqa: E731
        assert sorted(map(key, a["traceEvents"])) == sorted(map(key, b["traceEvents"]))
    elif fmt == "perfetto":  # names and descriptors come per part: the same records
        from tfprof.readers.perfetto import read_perfetto

        (tmp_path / "a.pftrace").write_bytes(whole.getvalue())
        (tmp_path / "b.pftrace").write_bytes(parted.getvalue())
        a, b = (
            read_perfetto(str(tmp_path / "a.pftrace")),
            read_perfetto(str(tmp_path / "b.pftrace")),
        )
        assert len(a) > 0 and a.names == b.names and a.columns == b.columns
    else:
        assert whole.getvalue() == parted.getvalue()


def test_collect_of_parts_is_build_timeline(data_dir: Path) -> None:
    jobs = Store(data_dir, create=False).load_jobs()
    tl = collect(timeline_parts(jobs))
    again = build_timeline(jobs)
    assert tl.names == again.names and tl.processes == again.processes
    assert tl.metadata == again.metadata and len(tl.flows) == len(again.flows) > 0
    assert np.array_equal(tl.flows.to_track, again.flows.to_track)
