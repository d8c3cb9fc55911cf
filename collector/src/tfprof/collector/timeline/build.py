"""Merge jobs' GPU activity into one TensorFlow-style timeline.

A pure step: ``JobData`` in, ``Timeline`` out, no files and no gRPC. The shared
``prepare`` step labels, shifts and windows the records; this module merges them one
task at a time: ``track_rows`` groups them into tracks, ``slice_tracks`` orders each
track's slices and gives them lanes, so ten million records merge in seconds;
``task_flows`` links and attributes, ``task_memory`` makes the memory counters, and
``metadata`` says what was merged (the units of the merge: ``merge_tasks``).

Track names follow tf.timeline (``tfprof.core.tracks.TrackKey``): one pseudo-device per
stream, ``/job:<job>/task:<task>/gpu:<N>/stream:<M>``, every copy also on
``/job:<job>/task:<task>/gpu:<N>/memcpy``, host counters on ``/job:<job>/task:<task>/cpu``.
``group_by="gpu"`` instead puts every job's tracks under the physical GPU (by UUID) they
ran on, one thread per track, so jobs sharing a GPU can be seen side by side.

The host side: CUDA API calls and host ranges (MARKER records with a thread) go on the
task's host thread tracks ``/job:<job>/task:<task>/cpu/thread:<TID>``; MARKER records
without a thread (Kineto's ``gpu_user_annotation``) on their GPU stream; MEMORY records
become one counter per device, ``gpu:<N> allocated_bytes``, on the task's host. Each GPU
record linked to its API call (``flows``) gives a launch flow (``TimelinePart.starts``
and ``ends``), and each is attributed to the host range it ran for (``attribution``:
``SliceTrack.op_id``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from tfprof.collector.jobdata import RECORD_COLUMNS, JobData, StreamData
from tfprof.collector.timeline.attribution import OpAttribution, attribute_ops
from tfprof.collector.timeline.layout import Layout
from tfprof.collector.timeline.memory_levels import MemorySeries
from tfprof.collector.timeline.merge_tasks import (
    MergeTask,
    NamedSource,
    TrackParts,
    group_tasks,
)
from tfprof.collector.timeline.metadata import MetadataBuilder, device_metadata
from tfprof.collector.timeline.model import (
    CounterTrack,
    GroupBy,
    LaunchFlows,
    PartedTimeline,
    SliceTrack,
    Timeline,
    TimelinePart,
    TraceProcess,
    collect,
)
from tfprof.collector.timeline.prepare import (
    HOST_SERIES,
    MergeError,
    NameTable,
    TimeWindow,
    host_samples,
    job_labels,
    prepare_stream,
    task_labels,
)
from tfprof.collector.timeline.slice_tracks import (
    slice_track,
    tracks_data,
)
from tfprof.collector.timeline.task_flows import (
    place_ops,
    task_records,
    unlinked_attribution,
)
from tfprof.collector.timeline.task_memory import memory_peaks, task_memory_series
from tfprof.collector.timeline.time_origin import StoredStream, origin_ns
from tfprof.collector.timeline.track_rows import task_tracks
from tfprof.collector.timeline.untraced_spans import untraced_track
from tfprof.core.counters import memory_counter
from tfprof.core.tracks import TrackKey

Window = tuple[int | None, int | None]


def build_timeline(
    jobs: Sequence[JobData],
    group_by: GroupBy = "job",
    window_ns: Window | None = None,
) -> Timeline:
    """Merge ``jobs`` into one timeline (every part of ``timeline_parts`` at once)."""
    return collect(timeline_parts(jobs, group_by, window_ns))


def timeline_parts(
    jobs: Sequence[JobData],
    group_by: GroupBy = "job",
    window_ns: Window | None = None,
) -> PartedTimeline:
    """Merge ``jobs`` into a timeline delivered one task (process) at a time.

    Record times are shifted by each stream's ``record_shift_ns``, host samples by its
    ``host_shift_ns``. ``window_ns = (lo, hi)`` (collector clock, either end ``None`` for
    open) keeps the slices that overlap ``[lo, hi)``, whole, and the host samples inside
    it. All times are then made relative to the earliest exported event, found first by
    a pass over times only (``time_origin``).

    A stored stream (``lake.lake_stream.LakeStream``) is loaded while its task's part is
    merged and rendered, and released before the next task's; names are interned in
    task order, so ids are those of a merge of everything at once. With
    ``group_by="gpu"`` a physical GPU's process is made by the first task that uses it
    and shared by the later ones; hosts still sort after every GPU (``Layout``).
    """
    if group_by not in ("job", "gpu"):
        raise MergeError(f"group_by must be 'job' or 'gpu', not {group_by!r}")
    window = _check_window(window_ns)
    kept = window or TimeWindow()
    labels = job_labels(jobs)
    tasks_of = [task_labels(job) for job in jobs]
    tasks = group_tasks(jobs, labels, tasks_of)
    origin = origin_ns(jobs, kept)
    meta = MetadataBuilder(jobs, labels, tasks_of, group_by, origin, window)
    merger = _Merger(group_by, origin, kept, meta)
    hosts = tuple(sorted({s.host for job in jobs for s in job.streams}))
    return PartedTimeline(
        group_by,
        origin,
        merger.parts(tasks),
        merger.finish,
        hosts,
        device_metadata(jobs, labels, tasks_of),
    )


@contextlib.contextmanager
def _loaded(streams: Sequence[StreamData]) -> Iterator[None]:
    """Every stored stream of a task loaded for the duration of the block."""
    with contextlib.ExitStack() as stack:
        for stream in streams:
            if isinstance(stream, StoredStream):
                # Every record column: the formats write launch geometry, registers, ...
                stack.enter_context(stream.loaded(host=True, columns=RECORD_COLUMNS))
        yield


class _Merger:
    """Merges tasks into parts one at a time; keeps what the metadata needs of each."""

    def __init__(
        self, group_by: GroupBy, origin: int, window: TimeWindow, meta: MetadataBuilder
    ) -> None:
        self.origin = origin
        self.window = window
        self.meta = meta
        self.layout = Layout(group_by)
        self.names = NameTable()
        self.flows = 0
        self.host_meta: dict[str, Any] = {"flows": {}, "tasks": []}
        self.memory: list[tuple[MergeTask, list[MemorySeries]]] = []

    def parts(self, tasks: Sequence[MergeTask]) -> Iterator[TimelinePart]:
        for task in tasks:
            with _loaded([s for _, s in task.streams]):
                preps = [
                    prepare_stream(stream, self.window, task.job_label, task.label)
                    for _, stream in task.streams
                ]
                for (index, _), prep in zip(task.streams, preps, strict=True):
                    self.meta.add(task.job_index, index, prep)
                task.sources = [NamedSource.named(prep, self.names) for prep in preps]
                del preps
                try:
                    yield self._part(task)
                finally:
                    task.release()

    def _part(self, task: MergeTask) -> TimelinePart:
        layout, origin = self.layout, self.origin
        known = len(layout.processes())
        slices: list[SliceTrack] = []
        counters: list[CounterTrack] = []
        linkable = task.has_host_records()  # else no flow, no attribution: nothing to place

        def add_slices(tracks: list[tuple[TrackKey, TrackParts]]) -> None:
            for (key, parts), data in zip(tracks, tracks_data(tracks, origin), strict=True):
                if linkable:
                    task.place(len(slices), key, data)
                slices.append(slice_track(key, parts, data, layout, task.cpu.format()))

        add_slices(task_tracks(task, host_side=False))
        host_name = task.cpu.format()
        samples = host_samples((s.prep.stream for s in task.sources), self.window)
        if samples["time_ns"].shape[0]:
            pid, tid = layout.place_host(host_name)
            rel = samples["time_ns"] - np.int64(origin)
            for series in HOST_SERIES:
                counters.append(CounterTrack(pid, tid, series, rel, samples[series]))
        memory = task_memory_series(task)
        if memory:
            self.memory.append((task, memory))
        for used in memory:
            pid, tid = layout.place_host(host_name)
            rel = used.time_ns - np.int64(origin)
            name = memory_counter(used.device)
            counters.append(CounterTrack(pid, tid, name, rel, used.allocated))
        add_slices(task_tracks(task, host_side=True))
        flows = self._link(task, slices) if linkable else self._unlinked(task, slices)
        streams = [stream for _, stream in task.streams]
        host, job, label = task.cpu.format(), task.job_label, task.label
        untraced = untraced_track(
            streams, host, job, label, self.window, layout, self.names, origin
        )
        if untraced is not None:
            slices.append(untraced)
        # Flow i of the export gets id i + 1, numbered on from the tasks before.
        starts, ends = flows.marks(first=self.flows)
        self.flows += len(flows)
        return TimelinePart(
            names=self.names.names,
            processes=tuple(layout.processes()[known:]),
            slices=tuple(slices),
            counters=tuple(counters),
            starts=starts,
            ends=ends,
        )

    def _link(self, task: MergeTask, slices: Sequence[SliceTrack]) -> LaunchFlows:
        """The task's launch flows and op attribution, placed on its slices."""
        if not task.track_of or not sum(len(s.prep) for s in task.sources):
            return LaunchFlows.empty()
        records, strings = task_records(task, self.names)
        attribution = attribute_ops(records, strings)
        track = np.concatenate(task.track_of)
        index = np.concatenate(task.slice_of)
        links = attribution.links
        placed = (track[links.api] >= 0) & (track[links.gpu] >= 0)
        api, gpu = links.api[placed], links.gpu[placed]
        flows = LaunchFlows(
            track[api], index[api], track[gpu], index[gpu], records["correlation"][gpu]
        )
        place_ops(attribution, records, track, index, slices)
        self._count_links(task, attribution)
        return flows

    def _unlinked(self, task: MergeTask, slices: Sequence[SliceTrack]) -> LaunchFlows:
        """``_link`` for a task without API calls or MARKERs (a GPU-only trace): the same
        counts, every GPU record unlinked and unattributed, without building the task's
        table."""
        if slices:  # as _link: a task with no slice on a stream or thread track counts none
            self._count_links(task, unlinked_attribution(task.sources))
        return LaunchFlows.empty()

    def _count_links(self, task: MergeTask, attribution: OpAttribution) -> None:
        stats = {**attribution.links.stats(), **attribution.counts()}
        self.host_meta["tasks"].append({"job": task.job_label, "task": task.label, **stats})
        total = self.host_meta["flows"]
        for k, v in stats.items():
            total[k] = total.get(k, 0) + v

    def finish(self) -> dict[str, Any]:
        metadata = self.meta.finish()
        metadata["host_side"] = self.host_meta
        metadata["host_side"]["memory_peak_bytes"] = memory_peaks(self.memory)
        return metadata


def _check_window(window_ns: Window | None) -> TimeWindow | None:
    if window_ns is None:
        return None
    lo, hi = window_ns
    if lo is not None and hi is not None and lo > hi:
        raise MergeError(f"window starts after it ends: {lo} > {hi}")
    return TimeWindow(lo, hi)


__all__ = [
    "CounterTrack",
    "GroupBy",
    "MergeError",
    "PartedTimeline",
    "SliceTrack",
    "Timeline",
    "TimelinePart",
    "TraceProcess",
    "Window",
    "build_timeline",
    "timeline_parts",
]
