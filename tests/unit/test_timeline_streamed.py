"""The streamed timeline: stored jobs merged and rendered a time chunk at a time.

A part is a time chunk of the records (every process's, in start order), not a
process: cut into chunks of a few rows, with launch flows whose two ends lie in two
parts, the parts collected, and every format rendered from them, say what one chunk
says, and what the same jobs read from their logs say."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest

from tests.unit.golden_viewers import perfetto_view, stepstats_view
from tfprof.collector.export import FORMATS, make_reporter
from tfprof.collector.lake.lake_stream import LakeStream
from tfprof.collector.lake.location import lake_of
from tfprof.collector.lake.publish import compact_data_dir
from tfprof.collector.lake.reader import open_jobs
from tfprof.collector.lake.segments import collector_id
from tfprof.collector.merged.streamed import StreamedTimeline
from tfprof.collector.merged.whole import build_timeline, collect
from tfprof.collector.read import time_chunks
from tfprof.collector.read.lake_catalog import catalog
from tfprof.collector.store import Store
from tfprof.collector.store.importer import import_files
from tfprof.collector.timeline.model import GroupBy
from tfprof.collector.timeline.prepare import TimeWindow

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"
KINETO = ("kineto-hta/simple_add.json.gz", "kineto-hta/event_sync_multi_stream.json.gz")
SMALL = 64  # rows a chunk holds: the shipped traces come in dozens of chunks


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """One job of two processes (the Kineto traces), compacted into the data dir's lake."""
    store = Store(tmp_path, fsync=False)
    import_files(store, [TRACES / f for f in KINETO], "train", as_steps=False, run_id="r1")
    _done, failed = compact_data_dir(tmp_path, lake_of(tmp_path), collector_id(tmp_path))
    assert not failed
    return tmp_path


def streamed(data_dir: Path, group_by: GroupBy = "job") -> StreamedTimeline:
    jobs = open_jobs([str(data_dir)]).jobs
    assert all(isinstance(s, LakeStream) for j in jobs for s in j.streams)
    return StreamedTimeline(jobs, catalog(jobs, TimeWindow()), group_by)


def _named(names: tuple[str, ...], ids: np.ndarray) -> list[str]:
    return [names[i] if i >= 0 else "" for i in ids.tolist()]


def test_parts_are_time_chunks_and_flows_cross_them(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(time_chunks, "CHUNK_ROWS", SMALL)
    timeline = streamed(data_dir)
    with pytest.raises(RuntimeError):
        _ = timeline.metadata  # complete only after the last part
    sizes, starts, ends, crossing = [], set(), set(), 0
    for part in timeline.parts():
        sizes.append(part.num_slices)
        mine = set(part.starts.id.tolist())
        crossing += len(set(part.ends.id.tolist()) - mine)
        starts |= mine
        ends |= set(part.ends.id.tolist())
    assert len(sizes) > 10 and sum(sizes) == timeline.num_slices
    assert max(sizes) < 4 * SMALL  # a chunk's rows, and a copy's twin on its memcpy track
    assert starts == ends == set(range(1, len(ends) + 1))  # each flow's two ends, one id
    assert crossing > 0  # some flows start in one part and end in a later one
    assert timeline.metadata["host_side"]["flows"]["linked"] == len(ends) > 0


@pytest.mark.parametrize("group_by", ["job", "gpu"])
def test_small_chunks_from_the_lake_give_the_logs_timeline(
    data_dir: Path, group_by: GroupBy, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = build_timeline(Store(data_dir, create=False).load_jobs(), group_by=group_by)
    monkeypatch.setattr(time_chunks, "CHUNK_ROWS", SMALL)
    tl = collect(streamed(data_dir, group_by))
    assert tl.processes == whole.processes and tl.origin_ns == whole.origin_ns
    assert len(tl.slices) == len(whole.slices)
    for track, theirs in zip(tl.slices, whole.slices, strict=True):
        assert (track.name, track.pid, track.thread_ids) == (theirs.name, theirs.pid,
                                                             theirs.thread_ids)  # fmt: skip
        for column in ("start_ns", "duration_ns", "lane", "kind"):
            assert np.array_equal(getattr(track, column), getattr(theirs, column)), column
        # Every record column the formats write; names are compared as strings.
        ids = {"name", "slice_name", "domain", "category"}  # names ids: compared as strings
        for column in (set(track.records) & set(theirs.records)) - ids:
            assert np.array_equal(track.column(column), theirs.column(column)), column
        assert _named(tl.names, track.name_id) == _named(whole.names, theirs.name_id)
        if theirs.op_id is not None:
            assert track.op_id is not None
            assert _named(tl.names, track.op_id) == _named(whole.names, theirs.op_id)
    assert len(tl.flows) == len(whole.flows) > 0
    for column in ("from_track", "from_slice", "to_track", "to_slice", "correlation"):
        assert sorted(getattr(tl.flows, column).tolist()) == sorted(
            getattr(whole.flows, column).tolist()
        )
    # The lake stores times already shifted; its streams say the shift it applied.
    assert tl.metadata == whole.metadata
    assert all(c["record_shift_ns"] > 0 for c in tl.metadata["clocks"])


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_every_format_renders_small_chunks_as_one(
    data_dir: Path, tmp_path: Path, fmt: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = {"chrome": "t.json", "perfetto": "t.pftrace", "xplane": "t.xplane.pb",
            "stepstats": "t.pbtxt"}[fmt]  # fmt: skip
    outputs = []
    for rows in (time_chunks.CHUNK_ROWS, SMALL):
        monkeypatch.setattr(time_chunks, "CHUNK_ROWS", rows)
        out = io.BytesIO()
        make_reporter(streamed(data_dir), name, fmt).render(out)
        outputs.append(out.getvalue())
    one, many = outputs
    if fmt == "chrome":  # the same events and metadata; events in an order of their own
        a, b = json.loads(one), json.loads(many)
        assert a["otherData"] == b["otherData"]
        key = lambda e: json.dumps(e, sort_keys=True)  # noqa: E731
        assert sorted(map(key, a["traceEvents"])) == sorted(map(key, b["traceEvents"]))
    elif fmt == "perfetto":  # names, strings and chunks come as parts add them
        for label, data in (("a", one), ("b", many)):
            (tmp_path / f"{label}.pftrace").write_bytes(data)
        a, b = (perfetto_view(tmp_path / f"{x}.pftrace") for x in "ab")
        a.pop("packets_by_kind"), b.pop("packets_by_kind")
        assert a == b and a["tracks"]
    elif fmt == "stepstats":  # a device's nodes in time order whatever the chunks
        for label, data in (("a", one), ("b", many)):
            (tmp_path / f"{label}.pbtxt").write_bytes(data)
        assert one == many
        assert stepstats_view(tmp_path / "a.pbtxt")["devices"]
    else:  # metadata ids are given as events first use them: compare the space read back
        from tfprof.readers.tfprotos import xplane

        spaces = []
        for data in (one, many):
            space = xplane().XSpace.FromString(data)
            spaces.append([
                (p.name, sorted(m.name for m in p.event_metadata.values()),
                 sorted(m.name for m in p.stat_metadata.values()),
                 [(line.name, line.timestamp_ns, line.duration_ps,
                   [(e.offset_ps, e.duration_ps, p.event_metadata[e.metadata_id].name,
                     sorted((p.stat_metadata[s.metadata_id].name,
                             s.uint64_value or p.stat_metadata[s.ref_value].name)
                            for s in e.stats)) for e in line.events])
                  for line in p.lines])
                for p in space.planes
            ])  # fmt: skip
        assert spaces[0] == spaces[1] and spaces[0]
