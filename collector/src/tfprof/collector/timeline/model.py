"""The merged timeline every exporter renders: where its tracks go, then its slices and
counter samples a time chunk at a time.

A timeline (``Timeline``, made by ``merged.streamed``) is known in two steps:

- its **layout** before any slice is written: every process, slice track (with its
  lanes: ``TrackPlace``) and counter track (``CounterPlace``) of the trace, found by a
  first pass over the records (``merged.plan``);
- its **parts**, one per time chunk of records read: each holds that chunk's slices of
  the tracks it touches (``SliceTrack``, columnar: numpy arrays, never one Python
  object per record), counter samples, and the launch flows its slices start or end
  (``FlowMarks``: a flow's two ends may lie in two parts). A part is valid until the
  next is asked for, so a reporter holds one chunk at a time.

The metadata (record counts, launch-flow statistics, memory peaks) is complete once the
last part was read.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

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
class TrackPlace:
    """Where one slice track goes, e.g. ``/job:a/task:0/gpu:0/stream:7``: lane ``k`` is
    drawn on thread ``thread_ids[k]`` of process ``pid``; its first start and last end
    (relative to the origin) and its slice count, known before any slice is written."""

    pid: int
    key: TrackKey
    thread_ids: tuple[int, ...]
    thread_names: tuple[str, ...]
    first_ns: int
    end_ns: int
    slices: int

    @property
    def name(self) -> str:
        return self.key.format()


@dataclass(frozen=True)
class CounterPlace:
    """One counter track: a host series (``cpu_percent``, ...) or a device's memory."""

    pid: int
    tid: int
    name: str


@dataclass(frozen=True)
class TimelineLayout:
    """Every process, slice track and counter track of the trace, in the trace's order."""

    processes: tuple[TraceProcess, ...]
    tracks: tuple[TrackPlace, ...]
    counters: tuple[CounterPlace, ...]


@dataclass(frozen=True)
class SliceTrack:
    """Slices of one track (``track``: its index in ``TimelineLayout.tracks``, whose
    place ``pid``, ``key`` and lanes repeat) in start order: a part's share of it.

    Times, kinds, names and lanes are the slices' own arrays; every other record column
    is read through ``rows`` from ``records``, the chunk's columns, shared rather than
    copied (``column("bytes")``). ``name_id`` indexes the part's ``names``: the kernel
    name, ``MEMCPY<kind>`` for copies, ``MEMSET``. Lane ``k`` is drawn on thread
    ``thread_ids[k]``.
    """

    track: int
    pid: int
    key: TrackKey
    thread_ids: tuple[int, ...]
    thread_names: tuple[str, ...]
    start_ns: np.ndarray  # relative to the timeline's origin, ascending
    duration_ns: np.ndarray
    kind: np.ndarray
    name_id: np.ndarray
    lane: np.ndarray
    rows: np.ndarray
    records: Mapping[str, np.ndarray]
    # Per slice, the names id of the host range (framework op, NVTX range) it is
    # attributed to, -1 for none (``attribution``); None on tracks never attributed.
    op_id: np.ndarray | None = None
    # Per slice, the names id of a MARKER's own category (``cpu_op``, ``tf_op``, an NVTX
    # domain), -1 for none; None on tracks that hold no MARKER.
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
    def end_ns(self) -> np.ndarray:
        end: np.ndarray = self.start_ns + self.duration_ns
        return end

    def known_value(self, name: str) -> int | None:
        """The value every slice has in record column ``name`` when the key says it
        without reading the column: a stream track's rows are those of one (device,
        stream). None for every other column and track."""
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


def widened(values: np.ndarray) -> np.ndarray:
    """Picked record values as int64 (the formats do their arithmetic in int64)."""
    if values.dtype == np.int64:
        return values
    wide: np.ndarray = values.astype(np.int64)
    return wide


@dataclass(frozen=True)
class CounterTrack:
    """Samples of one counter track (``index``: in ``TimelineLayout.counters``)."""

    index: int
    pid: int
    tid: int
    name: str
    time_ns: np.ndarray  # relative to the timeline's origin, ascending
    values: np.ndarray


@dataclass(frozen=True)
class FlowMarks:
    """Launch flows at slices of a part: slice ``slice[i]`` of ``part.slices[track[i]]``
    starts (or ends) the flow ``id[i]``. An id is unique in the whole export and never
    0 (``flow_ends``); a flow starts on its API call and ends on the GPU record the
    call launched, each end marked in the part that holds its slice."""

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
class TimelinePart:
    """What one time chunk of records adds to the trace.

    ``names`` is the name table so far (ids never change, names are only appended);
    ``starts``: the flows this part's slices start (API calls); ``ends``: the flows
    they end (the GPU records launched).
    """

    names: Sequence[str]
    slices: tuple[SliceTrack, ...]
    counters: tuple[CounterTrack, ...] = ()
    starts: FlowMarks = field(default_factory=FlowMarks.empty)
    ends: FlowMarks = field(default_factory=FlowMarks.empty)

    @property
    def num_slices(self) -> int:
        return sum(len(t) for t in self.slices)


class Timeline(Protocol):
    """What a reporter renders (``merged.streamed.StreamedTimeline``)."""

    @property
    def group_by(self) -> GroupBy: ...

    @property
    def origin_ns(self) -> int:
        """Collector-clock time of relative time 0: the earliest exported event."""

    @property
    def end_ns(self) -> int:
        """The latest slice end, relative to ``origin_ns``."""

    @property
    def hosts(self) -> tuple[str, ...]: ...

    @property
    def devices(self) -> Mapping[str, Any]:
        """``metadata["devices"]``, known before any part."""

    @property
    def layout(self) -> TimelineLayout: ...

    @property
    def num_slices(self) -> int: ...

    def parts(self) -> Iterator[TimelinePart]:
        """The parts, in order; can be iterated once."""

    @property
    def metadata(self) -> dict[str, Any]:
        """Complete once ``parts`` is exhausted."""
