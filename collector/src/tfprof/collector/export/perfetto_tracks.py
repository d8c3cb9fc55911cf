"""The track tree of the Perfetto export: what the Perfetto UI shows as groups and rows.

The UI titles a process with the last segment of its name when the name starts with
``/`` (it takes it for an executable's path) and a pid: ``/job:a/task:0/gpu:0/stream:7``
would read "stream:7 1", and jobs could not be told apart. Tracks with a name and a
parent (TrackDescriptor ``name``, ``parent_uuid``) are shown as written, nested as
written, in the order their parent asks for (``child_ordering = EXPLICIT``,
``sibling_order_rank``). So the export writes no process or thread tracks, only these:

- one root per job, ``/job:J``: the UI's top-level group (the UI orders top-level
  groups by name);
- under it, one row per pseudo-device, named in full (``/job:J/task:T/gpu:N/stream:M``,
  ``.../memcpy``, ``/job:J/task:T/cpu``), ranked by the timeline's sort index;
- a row's lanes: lane 0 is drawn on the row itself (so a collapsed row shows its
  slices), the others are its children (``lane K``); a host row's lanes are all children
  (``thread:TID``, ``thread:TID lane K``), its counters after them;
- grouped by GPU, a physical GPU's process (``/gpu:UUID (name)``) is a top-level row and
  each of its lanes a child named after its pseudo-device; hosts stay under their job.

Readers (``tfprof.readers.perfetto``) read this back: roots are the parentless tracks
named ``/job:J``, rows their children (or other parentless tracks), lanes the rows'
children.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pftrace

from tfprof.collector.timeline.model import SliceTrack, TimelineLayout, TrackPlace
from tfprof.core.counters import counter_title
from tfprof.core.tracks import TrackKey

_EXPLICIT = pftrace.TrackDescriptor.EXPLICIT
_BYTES = pftrace.CounterDescriptor.UNIT_SIZE_BYTES
COUNTER_RANK = 1 << 30  # a row's counters after its lanes (ranks are int32)


class TrackUuids:
    """Track uuids from pids, tids, counter and root indices alone (a timeline written
    part by part knows no maxima up front): every fourth number, in four interleaved
    classes, so they stay small (every slice packet names its lane's: one byte, not five)."""

    @staticmethod
    def process(pid: int) -> int:
        return 4 * pid

    @staticmethod
    def thread(tid: int) -> int:
        return 4 * tid + 1

    @staticmethod
    def counter(index: int) -> int:
        return 4 * index + 2

    @staticmethod
    def root(index: int) -> int:
        return 4 * index + 3


def job_of(process_name: str) -> str | None:
    """The job a row belongs to (its root), None for a physical GPU's row."""
    key = TrackKey.search(process_name) if process_name.startswith("/job:") else None
    return key.job if key is not None else None


@dataclass
class TrackTree:
    """The descriptors of a timeline's layout, remembering its roots and rows (what
    ``lane_uuids`` reads)."""

    roots: dict[str, int] = field(default_factory=dict)  # job -> root uuid
    rows: dict[int, str] = field(default_factory=dict)  # pid -> row name

    def own_row(self, track: SliceTrack | TrackPlace) -> bool:
        """Whether ``track`` is its process's only track (grouped by job, a GPU track):
        its lane 0 is then drawn on the row itself."""
        return self.rows.get(track.pid) == track.name and not track.key.is_host

    def lane_uuids(self, track: SliceTrack) -> list[int]:
        """The track uuid each lane's slices go on."""
        uuids = [TrackUuids.thread(tid) for tid in track.thread_ids]
        if uuids and self.own_row(track):
            uuids[0] = TrackUuids.process(track.pid)
        return uuids

    def descriptors(self, layout: TimelineLayout) -> Iterator[pftrace.TrackDescriptor]:
        """The roots and rows, the lanes, the counters: parents first."""
        for proc in layout.processes:
            job = job_of(proc.name)
            row = pftrace.TrackDescriptor(
                uuid=TrackUuids.process(proc.pid),
                name=proc.name,
                child_ordering=_EXPLICIT,
                sibling_order_rank=proc.sort_index,
            )
            if job is not None:
                if job not in self.roots:
                    uuid = self.roots[job] = TrackUuids.root(len(self.roots))
                    yield pftrace.TrackDescriptor(
                        uuid=uuid, name=f"/job:{job}", child_ordering=_EXPLICIT
                    )
                row.parent_uuid = self.roots[job]
            self.rows[proc.pid] = proc.name
            yield row
        for track in layout.tracks:
            lanes = zip(track.thread_ids, track.thread_names, strict=True)
            for k, (tid, name) in enumerate(lanes):
                if k == 0 and self.own_row(track):
                    continue  # drawn on the row
                yield pftrace.TrackDescriptor(
                    uuid=TrackUuids.thread(tid),
                    parent_uuid=TrackUuids.process(track.pid),
                    name=name,
                    sibling_order_rank=tid,
                )
        for index, counter in enumerate(layout.counters):
            desc = pftrace.TrackDescriptor(
                uuid=TrackUuids.counter(index),
                parent_uuid=TrackUuids.process(counter.pid),
                name=counter_title(counter.name),
                sibling_order_rank=COUNTER_RANK + index,
            )
            # A counter track needs its CounterDescriptor: trace_processor drops the
            # values of one without it (track_event_tokenizer_errors).
            if counter.name.endswith("_bytes"):
                desc.counter.unit = _BYTES
            elif counter.name == "cpu_percent":
                desc.counter.unit_name = "%"
            else:
                desc.counter.SetInParent()
            yield desc
