"""The merged timeline every exporter renders: processes, slice tracks and counter tracks.

Plain data, built by ``merge.build_timeline``. Everything stays columnar: a track holds
numpy arrays for its slices (and reads the other record columns by row from the stream,
without copying them), never one Python object per record.

A large timeline is rendered one part at a time (``PartedTimeline``, from
``merge.timeline_parts``), each part valid only until the next part is asked for (its
stream's records are released then), so a reporter holds one part's records at a time.
A part is one task's tracks today; a track may as well continue across parts (a part
per time chunk): the same ``TrackKey`` on the same process, each part holding a time
range of its slices. Writers therefore declare a process, thread or counter track the
first time a part uses it, and launch flows are marked at each end (``FlowMarks``),
since the API call and the GPU record it launched may lie in two parts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from tfprof.core.tracks import TrackKey, TrackKind

GroupBy = Literal["job", "gpu"]


@dataclass(frozen=True)
class TraceProcess:
    """One process of the trace: a pseudo-device, a physical GPU or a task's host."""

    pid: int
    name: str
    sort_index: int


@dataclass(frozen=True)
class SliceTrack:
    """The slices of one pseudo-device, e.g. ``/job:a/task:0/gpu:0/stream:7``, in start order.

    Times, kinds, names and lanes are the track's own arrays; every other record column
    is read through ``rows`` from ``records``, the source stream's columns, which are
    shared rather than copied (``column("bytes")``). ``name_id`` indexes
    ``Timeline.names``: the kernel name, ``MEMCPY<kind>`` for copies, ``MEMSET``. Lane
    ``k`` is drawn on thread ``thread_ids[k]``.
    """

    pid: int
    key: TrackKey
    thread_ids: tuple[int, ...]
    thread_names: tuple[str, ...]
    start_ns: np.ndarray  # relative to Timeline.origin_ns, ascending
    duration_ns: np.ndarray
    kind: np.ndarray
    name_id: np.ndarray
    lane: np.ndarray
    rows: np.ndarray
    records: Mapping[str, np.ndarray]
    # Per slice, the ``Timeline.names`` id of the host range (framework op, NVTX range)
    # it is attributed to, -1 for none (``attribution``); None on tracks never attributed.
    op_id: np.ndarray | None = None
    # Per slice, the ``Timeline.names`` id of a MARKER's own category (``cpu_op``,
    # ``tf_op``, an NVTX domain), -1 for none; None on tracks that hold no MARKER.
    category_id: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.start_ns.shape[0])

    @property
    def name(self) -> str:
        """The track's name, as every format writes it."""
        return self.key.format()

    @property
    def num_lanes(self) -> int:
        return len(self.thread_ids)

    @property
    def order(self) -> int:
        """The track's place in the timeline's order, whichever part first holds it: its
        first lane's tid (``Layout`` hands tids out in the order it places tracks); a
        track without lanes goes last."""
        return self.thread_ids[0] if self.thread_ids else _NO_LANE

    @property
    def end_ns(self) -> np.ndarray:
        end: np.ndarray = self.start_ns + self.duration_ns
        return end

    def known_value(self, name: str) -> int | None:
        """The value every slice has in record column ``name`` when the key says it
        without reading the column: a stream track's rows are those of one (device,
        stream) (``track_rows.split_by_stream``). None for every other column and track."""
        if self.key.kind is TrackKind.STREAM:
            if name == "device":
                return self.key.gpu
            if name == "stream":
                return self.key.stream
        return None

    def column(self, name: str, select: np.ndarray | slice | None = None) -> np.ndarray:
        """A record column (``RECORD_COLUMNS``) for this track's slices, or a selection."""
        rows = self.rows if select is None else self.rows[select]
        return widened(self.records[name][rows])


_NO_LANE = 1 << 62


def widened(values: np.ndarray) -> np.ndarray:
    """Picked record values as int64: a lake-read stream holds some columns narrower
    (lake/lake_stream.py), and the formats do their arithmetic in int64."""
    if values.dtype == np.int64:
        return values
    wide: np.ndarray = values.astype(np.int64)
    return wide


@dataclass(frozen=True)
class CounterTrack:
    """One host counter series (``cpu_percent``, ``rss_bytes``, ...) of one task."""

    pid: int
    tid: int
    name: str
    time_ns: np.ndarray  # relative to Timeline.origin_ns, ascending
    values: np.ndarray


@dataclass(frozen=True)
class LaunchFlows:
    """Arrows from API calls to the GPU activity they launched (``flows.link_launches``).

    Flow ``i`` goes from slice ``from_slice[i]`` of track ``Timeline.slices[from_track[i]]``
    (the API call, on its host thread track) to slice ``to_slice[i]`` of
    ``Timeline.slices[to_track[i]]`` (the kernel, copy, memset or sync on its stream
    track; copies are also drawn on the memcpy track, the flow goes to the stream one).
    """

    from_track: np.ndarray
    from_slice: np.ndarray
    to_track: np.ndarray
    to_slice: np.ndarray
    correlation: np.ndarray

    def __len__(self) -> int:
        return int(self.correlation.shape[0])

    @classmethod
    def empty(cls) -> LaunchFlows:
        z = np.zeros(0, dtype=np.int64)
        return cls(z, z, z, z, z)

    def marks(self, first: int = 0) -> tuple[FlowMarks, FlowMarks]:
        """The flows as marks at their two ends (starts, ends): flow ``i`` gets id
        ``first + i + 1``, so ids go on across parts and are never 0."""
        ids = np.arange(first + 1, first + len(self) + 1, dtype=np.int64)
        starts = FlowMarks(self.from_track, self.from_slice, ids)
        return starts, FlowMarks(self.to_track, self.to_slice, ids)


@dataclass(frozen=True)
class FlowMarks:
    """One end of launch flows, marked at slices of a part: slice ``slice[i]`` of
    ``part.slices[track[i]]`` starts (or ends) flow ``id[i]``.

    A flow starts on its API call and ends on the GPU record the call launched, each end
    marked in the part that holds its slice; ids are unique in the whole export and
    never 0, so the two ends meet whatever parts they lie in. A call may start several
    flows (a graph launch); a GPU record ends one at most.
    """

    track: np.ndarray
    slice: np.ndarray
    id: np.ndarray

    def __len__(self) -> int:
        return int(self.id.shape[0])

    @classmethod
    def empty(cls) -> FlowMarks:
        z = np.zeros(0, dtype=np.int64)
        return cls(z, z, z)


@dataclass(frozen=True)
class Timeline:
    group_by: GroupBy
    origin_ns: int  # collector-clock time of relative time 0: the earliest exported event
    names: tuple[str, ...]
    processes: tuple[TraceProcess, ...]
    slices: tuple[SliceTrack, ...]
    counters: tuple[CounterTrack, ...]
    metadata: dict[str, Any]
    flows: LaunchFlows = field(default_factory=LaunchFlows.empty)

    @property
    def num_slices(self) -> int:
        return sum(len(t) for t in self.slices)


@dataclass(frozen=True)
class TimelinePart:
    """One part of a ``PartedTimeline``: one task's tracks, or a time range of several.

    ``names`` is the name table so far (ids never change, names are only appended);
    ``processes`` the processes this part is the first to use (a physical GPU's, with
    ``group_by="gpu"``, is shared by later parts). A track (same ``pid`` and ``key``)
    may appear in several parts, in time order, each holding a time range of its
    slices; its ``thread_ids`` in a later part start with those it had before (a part
    may add lanes, never renumber them). A counter track (same ``pid``, ``tid`` and
    ``name``) may likewise go on across parts. ``starts`` marks the flows this part's
    slices start (API calls), ``ends`` those they end (the GPU records launched).
    """

    names: tuple[str, ...]
    processes: tuple[TraceProcess, ...]
    slices: tuple[SliceTrack, ...]
    counters: tuple[CounterTrack, ...]
    starts: FlowMarks = field(default_factory=FlowMarks.empty)
    ends: FlowMarks = field(default_factory=FlowMarks.empty)

    @property
    def num_slices(self) -> int:
        return sum(len(t) for t in self.slices)


class PartedTimeline:
    """A timeline delivered part by part, each part read only while it is rendered.

    What is known before the first part: the grouping, the time origin, the hosts and
    the devices (``devices``: ``metadata["devices"]``). ``metadata`` (record counts,
    launch-flow statistics, memory peaks) is complete only once ``parts`` is exhausted.
    ``parts`` can be iterated once.
    """

    def __init__(
        self,
        group_by: GroupBy,
        origin_ns: int,
        parts: Iterable[TimelinePart],
        finish: Callable[[], dict[str, Any]],
        hosts: tuple[str, ...] = (),
        devices: Mapping[str, Any] | None = None,
    ) -> None:
        self.group_by = group_by
        self.origin_ns = origin_ns
        self.hosts = hosts
        self.devices: Mapping[str, Any] = devices or {}
        self.num_slices = 0  # of the parts rendered so far
        self.end_ns = 0  # the latest slice end so far, relative to origin_ns
        self._parts: Iterable[TimelinePart] | None = parts
        self._finish = finish
        self._metadata: dict[str, Any] | None = None

    @classmethod
    def whole(cls, timeline: Timeline) -> PartedTimeline:
        """A built ``Timeline`` as one part."""
        starts, ends = timeline.flows.marks()
        part = TimelinePart(
            timeline.names, timeline.processes, timeline.slices, timeline.counters, starts, ends
        )
        jobs = timeline.metadata.get("jobs", [])
        hosts = sorted({h for job in jobs for h in job.get("hosts", [])})
        return cls(
            timeline.group_by,
            timeline.origin_ns,
            [part],
            lambda: timeline.metadata,
            tuple(hosts),
            timeline.metadata.get("devices", {}),
        )

    def parts(self) -> Iterator[TimelinePart]:
        if self._parts is None:
            raise RuntimeError("a PartedTimeline's parts can be read once")
        parts, self._parts = iter(self._parts), None
        for part in parts:
            self.num_slices += part.num_slices
            ends = [int(t.end_ns.max()) for t in part.slices if len(t)]
            self.end_ns = max([self.end_ns, *ends])
            yield part
            del part  # the records it refers to are released before the next is made
        self._metadata = self._finish()

    @property
    def metadata(self) -> dict[str, Any]:
        if self._metadata is None:
            raise RuntimeError("the timeline's metadata is complete after its last part")
        return self._metadata


def collect(parted: PartedTimeline) -> Timeline:
    """Every part of ``parted`` in one ``Timeline`` (for inputs that fit in memory); its
    flows in id order, each a start and an end of one id."""
    names: tuple[str, ...] = ()
    processes: list[TraceProcess] = []
    slices: list[SliceTrack] = []
    counters: list[CounterTrack] = []
    starts: list[FlowMarks] = []
    ends: list[FlowMarks] = []
    correlation: list[np.ndarray] = []
    for part in parted.parts():
        names = part.names
        processes += part.processes
        base = len(slices)
        slices += part.slices
        counters += part.counters
        for marks, out in ((part.starts, starts), (part.ends, ends)):
            out.append(FlowMarks(marks.track + base, marks.slice, marks.id))
        # The GPU record's own correlation id, read while the part's records are held.
        correlation.append(_end_correlation(part.slices, part.ends))
    return Timeline(
        group_by=parted.group_by,
        origin_ns=parted.origin_ns,
        names=names,
        processes=tuple(processes),
        slices=tuple(slices),
        counters=tuple(counters),
        metadata=parted.metadata,
        flows=_paired(starts, ends, correlation),
    )


def _end_correlation(slices: tuple[SliceTrack, ...], ends: FlowMarks) -> np.ndarray:
    out = np.zeros(len(ends), dtype=np.int64)
    for t in np.unique(ends.track).tolist():
        at = np.flatnonzero(ends.track == t)
        out[at] = slices[t].column("correlation", ends.slice[at])
    return out


def _paired(
    starts: list[FlowMarks], ends: list[FlowMarks], correlation: list[np.ndarray]
) -> LaunchFlows:
    """Flows from marks: the start and the end of each id (ids with one end only, a flow
    leaving the collected parts, are left out)."""
    if not starts:
        return LaunchFlows.empty()
    s = FlowMarks(*(np.concatenate([getattr(m, c) for m in starts]) for c in _MARK_COLUMNS))
    e = FlowMarks(*(np.concatenate([getattr(m, c) for m in ends]) for c in _MARK_COLUMNS))
    corr = np.concatenate(correlation)
    _, si, ei = np.intersect1d(s.id, e.id, assume_unique=True, return_indices=True)
    return LaunchFlows(s.track[si], s.slice[si], e.track[ei], e.slice[ei], corr[ei])


_MARK_COLUMNS = ("track", "slice", "id")


def parted(timeline: Timeline | PartedTimeline) -> PartedTimeline:
    """What reporters render: a ``PartedTimeline`` as it is, a ``Timeline`` as one part."""
    return timeline if isinstance(timeline, PartedTimeline) else PartedTimeline.whole(timeline)
