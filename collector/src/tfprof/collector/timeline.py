"""The merged timeline every exporter renders: processes, slice tracks and counter tracks.

Plain data, built by ``merge.build_timeline``. Everything stays columnar: a track holds
numpy arrays for its slices (and reads the other record columns by row from the stream,
without copying them), never one Python object per record.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from tfprof.core.tracks import TrackKey

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
    def end_ns(self) -> np.ndarray:
        end: np.ndarray = self.start_ns + self.duration_ns
        return end

    def column(self, name: str, select: np.ndarray | slice | None = None) -> np.ndarray:
        """A record column (``RECORD_COLUMNS``) for this track's slices, or a selection."""
        rows = self.rows if select is None else self.rows[select]
        values: np.ndarray = self.records[name][rows]
        return values


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
