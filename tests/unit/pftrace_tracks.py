"""The track tree of our .pftrace read back as Chrome's names: (process, thread) per lane.

The export writes named tracks (collector/export/perfetto_tracks.py): a root per job
(``/job:J``), rows under it (Chrome's processes), a row's children (Chrome's threads),
lane 0 of a pseudo-device drawn on its row. Tests compare what each slice and counter is
on with the Chrome export through these names.
"""

from __future__ import annotations

import re
from typing import Any

_ROOT = re.compile(r"/job:[^/]+")


class PftraceTracks:
    """Each descriptor of ``packets``: ``lanes`` maps a track a slice may be on to its
    (process, thread) names, ``rows`` a row to its name, ``counters`` a counter track to
    (its row's name, its name); ``roots`` are the job roots' names, in file order."""

    def __init__(self, packets: list[Any]) -> None:
        self.roots: dict[int, str] = {}
        self.rows: dict[int, str] = {}
        self.lanes: dict[int, tuple[str, str]] = {}
        self.counters: dict[int, tuple[str, str]] = {}
        self.descriptors: list[Any] = []
        for p in packets:
            if p.HasField("track_descriptor"):
                self.add(p.track_descriptor)

    def add(self, d: Any) -> None:
        assert not (d.HasField("process") or d.HasField("thread")), "no process tracks"
        self.descriptors.append(d)
        if d.HasField("counter"):
            self.counters[d.uuid] = (self.rows[d.parent_uuid], d.name)
        elif not d.parent_uuid and _ROOT.fullmatch(d.name):
            self.roots[d.uuid] = d.name
        elif not d.parent_uuid or d.parent_uuid in self.roots:
            self.rows[d.uuid] = d.name
            self.lanes[d.uuid] = (d.name, "lane 0")
        else:
            self.lanes[d.uuid] = (self.rows[d.parent_uuid], d.name)
