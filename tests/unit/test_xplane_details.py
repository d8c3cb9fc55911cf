"""XPlane details texts (kernel shapes, copy sizes) interned as stat metadata up to a
bound per plane, written in place after it: every event keeps its details either way."""

from __future__ import annotations

import io

import pytest

from tfprof.collector.export import xplane_events
from tfprof.collector.export.xplane import XPlaneReporter
from tfprof.collector.jobdata import JobData
from tfprof.collector.merged.whole import build_timeline
from tfprof.readers.tfprotos import xplane

from .merge_rows import kernel, memcpy, stream

DETAILS = ("kernel_details", "memcpy_details")


def _details(monkeypatch: pytest.MonkeyPatch, bound: int) -> tuple[list[list[str]], int]:
    """Each GPU line's details texts, event by event, and the stat metadata written."""
    monkeypatch.setattr(xplane_events, "MAX_DETAIL_REFS", bound)
    rows = [kernel(10 * i, 5, grid_x=i + 1) for i in range(20)]  # every shape its own
    rows += [memcpy(300 + 10 * i, 5, nbytes=1000 + i) for i in range(20)]  # every size too
    timeline = build_timeline([JobData("train", "r1", [stream(rows)])])
    out = io.BytesIO()
    XPlaneReporter(timeline, host="h").render(out)
    space = xplane().XSpace.FromString(out.getvalue())
    found, metadata = [], 0
    for plane in space.planes:
        if not plane.name.startswith("/device:GPU"):
            continue
        metadata += len(plane.stat_metadata)
        names = {k: m.name for k, m in plane.stat_metadata.items()}
        for line in plane.lines:
            texts = []
            for event in line.events:
                for s in event.stats:
                    if names[s.metadata_id] in DETAILS:
                        texts.append(names[s.ref_value] if s.ref_value else s.str_value)
            found.append(texts)
    return found, metadata


def test_details_past_the_bound_are_written_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    interned, all_metadata = _details(monkeypatch, 1 << 16)
    bounded, few_metadata = _details(monkeypatch, 3)
    assert interned == bounded  # the same text on every event
    assert sum(len(t) for t in interned) == 40 and len({t for ts in interned for t in ts}) == 40
    assert all_metadata - few_metadata == 40 - 3  # only three texts interned
