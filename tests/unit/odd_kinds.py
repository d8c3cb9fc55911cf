"""A timeline slice of a record kind this version does not know.

No input reaches the timeline with one any more (everything is read through the lake,
whose tables hold the seven kinds), but a writer must still show one plainly, never
drop it: ``odd_kind`` makes one on a built timeline, as a newer reader could hand it.
"""

from __future__ import annotations

from dataclasses import replace

from tfprof.collector.merged.whole import WholeTimeline

UNKNOWN_KIND = 9
UNKNOWN_NAME = "unknown activity"


def odd_kind(timeline: WholeTimeline, correlation: int) -> WholeTimeline:
    """``timeline`` with its slices of ``correlation`` made of kind ``UNKNOWN_KIND``,
    named as the timeline names a record it cannot name."""
    names = (*timeline.names, UNKNOWN_NAME)
    slices = []
    for track in timeline.slices:
        hit = track.column("correlation") == correlation
        if hit.any():
            kind, name = track.kind.copy(), track.name_id.copy()
            kind[hit], name[hit] = UNKNOWN_KIND, len(names) - 1
            records = {c: v.copy() for c, v in track.records.items()}
            records["kind"][track.rows[hit]] = UNKNOWN_KIND
            track = replace(track, kind=kind, name_id=name, records=records)
        slices.append(track)
    return replace(timeline, names=names, slices=tuple(slices))
