"""The .pftrace as the Perfetto UI reads it: flows that start before they end in the file,
and a tree of named tracks (a root per job, a row per pseudo-device, its lanes below)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.traces import shared_traces
from tests.unit.perfetto_readback import perfetto_packets
from tests.unit.pftrace_tracks import PftraceTracks
from tests.unit.sample_timeline import sample_timeline
from tfprof.collector.export.perfetto_tracks import COUNTER_RANK
from tfprof.collector.merged.whole import WholeTimeline as Timeline
from tfprof.collector.merged.whole import build_timeline
from tfprof.collector.store.importer import jobs_from_files

pftrace = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")


def two_jobs(group_by: str = "job") -> Timeline:
    kineto = shared_traces() / "kineto-hta"
    paths: list[Path] = [kineto / "simple_add.json.gz", kineto / "event_sync_multi_stream.json.gz"]
    return build_timeline(jobs_from_files(paths, as_steps=False), group_by=group_by)  # type: ignore[arg-type]


def test_each_flow_starts_before_it_ends_in_the_file() -> None:
    """trace_processor orders packets by time, by their place in the file among equal
    times, and drops (silently) the end of a flow it has not seen begin: a kernel that
    starts the nanosecond its launch does must come after the launch in the file."""
    timeline = two_jobs()
    starts: dict[int, tuple[int, int]] = {}
    ends: dict[int, tuple[int, int]] = {}
    for at, p in enumerate(perfetto_packets(timeline)):
        starts.update((i, (p.timestamp, at)) for i in p.track_event.flow_ids)
        ends.update((i, (p.timestamp, at)) for i in p.track_event.terminating_flow_ids)
    assert set(starts) == set(ends) and len(starts) == len(timeline.flows) == 150
    same_time = [i for i in starts if starts[i][0] == ends[i][0]]
    assert len(same_time) == 19  # stream waits and syncs: their end starts with their call
    assert [i for i in starts if starts[i][1] > ends[i][1]] == []


def _rank(d: Any) -> int:
    return int(d.sibling_order_rank)


def test_a_root_per_job_a_row_per_pseudo_device_in_the_timeline_order() -> None:
    timeline = two_jobs()
    tracks = PftraceTracks(perfetto_packets(timeline))
    assert list(tracks.roots.values()) == ["/job:simple_add", "/job:event_sync_multi_stream"]
    by_uuid = {d.uuid: d for d in tracks.descriptors}
    explicit = pftrace.TrackDescriptor.EXPLICIT
    assert all(by_uuid[u].child_ordering == explicit for u in [*tracks.roots, *tracks.rows])
    rows = {name: by_uuid[u] for u, name in tracks.rows.items()}
    assert sorted(rows) == sorted(p.name for p in timeline.processes)  # named in full
    for proc in timeline.processes:
        row = rows[proc.name]
        assert tracks.roots[row.parent_uuid] == "/job:" + proc.name.split("/")[1][len("job:") :]
        assert _rank(row) == proc.sort_index
    for track in timeline.slices:
        row = track.name if not track.key.is_host else track.key.device_prefix
        lanes = [n for u, (r, n) in tracks.lanes.items() if r == row and u not in tracks.rows]
        if track.key.is_host:  # every lane of a host thread is a child of the host's row
            assert set(track.thread_names) <= set(lanes)
        else:  # lane 0 on the row itself, so a collapsed row shows the stream
            assert tracks.lanes[next(u for u, n in tracks.rows.items() if n == row)][0] == row
            assert lanes == [f"lane {k}" for k in range(1, track.num_lanes)]


def test_slices_are_on_rows_and_lanes_counters_after_the_lanes() -> None:
    packets = perfetto_packets(sample_timeline())
    tracks = PftraceTracks(packets)
    on = {p.track_event.track_uuid for p in packets if p.HasField("track_event")}
    slices = {p.track_event.track_uuid for p in packets
              if p.track_event.type == pftrace.TrackEvent.TYPE_SLICE_BEGIN}  # fmt: skip
    assert slices <= set(tracks.lanes) and on - slices == set(tracks.counters)
    counters = {name for _, name in tracks.counters.values()}
    assert counters == {"cpu percent", "rss bytes", "threads count", "read bytes", "write bytes"}
    by_uuid = {d.uuid: d for d in tracks.descriptors}
    cpu = next(u for u, n in tracks.rows.items() if n == "/job:train/task:0/cpu")
    children = [d for d in tracks.descriptors if d.parent_uuid == cpu]
    assert all(_rank(by_uuid[u]) >= COUNTER_RANK for u in tracks.counters)
    assert all(_rank(d) < COUNTER_RANK for d in children if not d.HasField("counter"))


def test_grouped_by_gpu_a_physical_gpu_is_a_row_of_its_own() -> None:
    timeline = two_jobs("gpu")
    tracks = PftraceTracks(perfetto_packets(timeline))
    by_uuid = {d.uuid: d for d in tracks.descriptors}
    gpus = [n for u, n in tracks.rows.items() if not by_uuid[u].parent_uuid]
    assert gpus and all(n.startswith("/gpu:") for n in gpus)
    hosts = [n for u, n in tracks.rows.items() if by_uuid[u].parent_uuid]
    assert sorted(hosts) == [
        "/job:event_sync_multi_stream/task:0/cpu",
        "/job:simple_add/task:0/cpu",
    ]
    lanes = {n for u, (r, n) in tracks.lanes.items() if r in gpus and u not in tracks.rows}
    assert lanes == {n for t in timeline.slices if not t.key.is_host for n in t.thread_names}
