"""The units a timeline merge works in: a task's named sources, the task, a track's data.

The streams of a job are grouped into tasks (``group_tasks``), merged one task at a
time; each stream becomes a ``NamedSource`` (its records with timeline name ids), and
each track's slices a ``TrackData`` (in start order, with lanes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from tfprof.collector.jobdata import JobData, StreamData
from tfprof.collector.timeline.prepare import NameTable, PreparedStream
from tfprof.collector.timeline.slice_names import slice_name_ids
from tfprof.core.records import RecordKind
from tfprof.core.tracks import TrackKey, TrackKind


@dataclass(frozen=True)
class NamedSource:
    """One prepared stream with its kept records' kinds and timeline name ids (and the
    name ids of its MARKER records' categories, -1 on other rows; None without any)."""

    prep: PreparedStream
    kind: np.ndarray
    name: np.ndarray
    category: np.ndarray | None

    @classmethod
    def named(cls, prep: PreparedStream, names: NameTable) -> NamedSource:
        kind = prep.column("kind")
        ids = slice_name_ids(
            names,
            prep.stream.strings,
            kind,
            prep.column("name"),
            prep.column("copy_kind"),
            prep.column("sync_type"),
        )
        marker = kind == RecordKind.MARKER
        if not marker.any():
            return cls(prep, kind, ids, None)
        category = np.where(marker, prep.column("category"), 0)
        return cls(prep, kind, ids, names.intern_column(prep.stream.strings, category, -1))


@dataclass
class MergeTask:
    """The streams of one job that share a task label (normally exactly one process).

    ``sources``, ``track_of`` and ``slice_of`` hold the task's loaded records while its
    part is merged and rendered, and are emptied after."""

    job_index: int
    job_label: str
    label: str
    sort_key: tuple[int, int, str, str, int]
    streams: list[tuple[int, StreamData]] = field(default_factory=list)  # (index in job)
    sources: list[NamedSource] = field(default_factory=list)  # the streams, prepared and named
    # Per source, per kept row: its slice on its stream or thread track (not the
    # memcpy repeat) as (index into the part's slices, index in that track), -1: none.
    track_of: list[np.ndarray] = field(default_factory=list)
    slice_of: list[np.ndarray] = field(default_factory=list)

    @property
    def cpu(self) -> TrackKey:
        return TrackKey.for_cpu(self.job_label, self.label)

    def place(self, track: int, key: TrackKey, origin: TrackData) -> None:
        """Remember where the slices of ``origin`` went, unless ``key`` repeats them."""
        if key.kind is TrackKind.MEMCPY:
            return
        if not self.track_of:
            self.track_of = [np.full(len(s.prep), -1, dtype=np.int64) for s in self.sources]
            self.slice_of = [np.full(len(s.prep), -1, dtype=np.int64) for s in self.sources]
        if isinstance(origin.part, int):  # one source: every slice, in order
            self.track_of[origin.part][origin.kept] = track
            self.slice_of[origin.part][origin.kept] = np.arange(origin.kept.shape[0])
            return
        for part in np.unique(origin.part).tolist():
            sel = np.flatnonzero(origin.part == part)
            self.track_of[part][origin.kept[sel]] = track
            self.slice_of[part][origin.kept[sel]] = sel

    def release(self) -> None:
        self.sources, self.track_of, self.slice_of = [], [], []

    def has_host_records(self) -> bool:
        """Whether the task has a record to link or attribute GPU records to: an API call
        or a MARKER (``NamedSource.category`` is None exactly when a source holds no MARKER)."""
        return any(
            s.category is not None or bool((s.kind == RecordKind.API).any()) for s in self.sources
        )


def task_order(task: str) -> tuple[int, int, str]:
    return (0, int(task), task) if task.isdigit() else (1, 0, task)


def group_tasks(
    jobs: Sequence[JobData], labels: Sequence[str], tasks_of: Sequence[Sequence[str]]
) -> list[MergeTask]:
    """Group each job's streams by task label, in job order then task order (the order
    parts come in and names are interned in)."""
    tasks: list[MergeTask] = []
    for j, (job, job_label) in enumerate(zip(jobs, labels, strict=True)):
        by_label: dict[str, MergeTask] = {}
        for index, (s, label) in enumerate(zip(job.streams, tasks_of[j], strict=True)):
            task = by_label.get(label)
            if task is None:
                sort_key = (*task_order(s.task), s.host, s.pid)
                task = by_label[label] = MergeTask(j, job_label, label, sort_key)
            task.streams.append((index, s))
        tasks.extend(sorted(by_label.values(), key=lambda t: t.sort_key))
    return tasks


# (the source's index in its task, the source, kept-row indices of the source on the track)
TrackParts = list[tuple[int, NamedSource, np.ndarray]]


@dataclass
class TrackData:
    start: np.ndarray
    duration: np.ndarray
    kind: np.ndarray
    name: np.ndarray
    lane: np.ndarray
    num_lanes: int
    rows: np.ndarray
    records: Mapping[str, np.ndarray]
    part: np.ndarray | int  # per slice (or for all): the index of its source in the task
    kept: np.ndarray  # per slice: its kept-row index in that source
    category: np.ndarray | None  # per slice: a MARKER's category name id, else -1; or None
