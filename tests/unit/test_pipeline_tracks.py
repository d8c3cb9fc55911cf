"""One set of records through the timeline, the streams view and the advice: the same track
names everywhere (TrackKey), context-wide syncs on ``stream:none`` included."""

from __future__ import annotations

import io
import json

from tfprof.collector.advice import advise
from tfprof.collector.export import ChromeReporter
from tfprof.collector.jobdata import JobData
from tfprof.collector.merged.whole import build_timeline
from tfprof.core.records import SYNC_NO_STREAM
from tfprof.core.tracks import TrackKey, TrackKind

from .analysis_data import copy, job, kernel, stream, sync
from .stored_jobs import catalog_of, rows_of

CONTEXT_WIDE = "/job:train/task:0.1/gpu:0/stream:none"


def _jobs() -> list[JobData]:
    # Two processes report task 0 (a forked child): the timeline tells them apart by pid.
    parent = stream([kernel(0, 100), copy(100, 50, 1 << 20), sync(150, 400, 4, SYNC_NO_STREAM),
                     sync(600, 10, 3, 7)], pid=1)  # fmt: skip
    child = stream([kernel(0, 80, stream=9)], pid=2)
    parent.task = child.task = "0"
    return [job("train", parent, child)]


def test_timeline_streams_view_and_advice_name_tracks_alike() -> None:
    jobs = _jobs()
    timeline = build_timeline(jobs)
    on_timeline = {t.name: t.key for t in timeline.slices}
    assert CONTEXT_WIDE in on_timeline
    assert not any("4294967295" in name for name in on_timeline)
    stream_tracks = {n for n, k in on_timeline.items() if k.kind is TrackKind.STREAM}

    rows = rows_of("streams", jobs)
    assert {r.track for r in rows} == stream_tracks
    for r in rows:  # each row's track parses to the timeline's key for it
        assert TrackKey.parse(r.track) == on_timeline[r.track]
    none_row = next(r for r in rows if r.stream == SYNC_NO_STREAM)
    assert none_row.track == CONTEXT_WIDE

    (stalls,) = advise(catalog_of(jobs), ["sync-stalls"])[1]
    assert CONTEXT_WIDE in stalls.streams
    assert set(stalls.streams) <= stream_tracks


def test_chrome_export_names_the_context_wide_track_stream_none() -> None:
    out = io.BytesIO()
    ChromeReporter(build_timeline(_jobs())).render(out)
    trace = json.loads(out.getvalue())
    processes = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"}
    assert CONTEXT_WIDE in processes
    assert "/job:train/task:0.1/gpu:0/memcpy" in processes
    assert "/job:train/task:0.2/gpu:0/stream:9" in processes
