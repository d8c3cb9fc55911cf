"""Which rows of a task go on which track: streams, host threads and memcpy tracks."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import numpy as np

from tfprof.collector.timeline.merge_tasks import MergeTask, NamedSource, TrackParts
from tfprof.core.records import RecordKind
from tfprof.core.tracks import TrackKey, TrackKind


def task_tracks(task: MergeTask, host_side: bool) -> list[tuple[TrackKey, TrackParts]]:
    """The task's GPU tracks (by GPU ordinal, streams numerically, memcpy last) or its
    host thread tracks (by thread id), in timeline order."""
    parts: dict[TrackKey, TrackParts] = {}
    for s_index, source in enumerate(task.sources):
        for key, idx in group_rows(source):
            if key.is_host == host_side:
                parts.setdefault(key, []).append((s_index, source, idx))
    order = sorted(parts, key=lambda k: (k.gpu, k.kind is TrackKind.MEMCPY, k.stream, k.thread))
    return [(key, parts[key]) for key in order]


def group_rows(source: NamedSource) -> Iterator[tuple[TrackKey, np.ndarray]]:
    """Each stream track's kept-row indices, each host thread track's, then each GPU's
    memcpy track's (the copies). MEMORY records go on no track (``task_memory_series``)."""
    prep = source.prep
    if len(prep) == 0:
        return
    job, task = prep.job_label, prep.task_label
    device, stream = prep.column("device"), prep.column("stream")
    thread = prep.column("thread")
    on_thread = (source.kind == RecordKind.API) | (
        (source.kind == RecordKind.MARKER) & (thread != 0)
    )
    on_gpu = ~on_thread & (source.kind != RecordKind.MEMORY)

    if on_gpu.all():
        yield from split_by_stream(job, task, device, stream)
    else:
        gpu_rows = np.flatnonzero(on_gpu)
        for key, idx in split_by_stream(job, task, device[gpu_rows], stream[gpu_rows]):
            yield key, gpu_rows[idx]
        host_rows = np.flatnonzero(on_thread)
        for key, idx in split_by(thread[host_rows], lambda t: TrackKey.for_thread(job, task, t)):
            yield key, host_rows[idx]
    copies = np.flatnonzero(source.kind == RecordKind.MEMCPY)
    if copies.shape[0]:
        for key, idx in split_by(device[copies], lambda k: TrackKey.for_memcpy(job, task, k)):
            yield key, copies[idx]


def split_by_stream(
    job: str, task: str, device: np.ndarray, stream: np.ndarray
) -> Iterator[tuple[TrackKey, np.ndarray]]:
    """The rows of each (device, stream), by device then stream. The usual small
    ordinals make one key of at most 16 bits, which numpy sorts by radix, faster than a
    64-bit key's merge sort (bench/results/cpu-design-choices.txt, "sort")."""
    if device.shape[0] == 0:
        return
    streams = int(stream.max()) + 1
    if device.min() >= 0 and stream.min() >= 0 and (int(device.max()) + 1) * streams <= 1 << 16:
        yield from split_by(
            device * streams + stream,
            lambda k: TrackKey.for_stream(job, task, k // streams, k % streams),
        )
        return
    yield from split_by(
        (device << 32) | stream,
        lambda k: TrackKey.for_stream(job, task, k >> 32, k & 0xFFFFFFFF),
    )


def split_by(
    keys: np.ndarray, decode: Callable[[int], TrackKey]
) -> Iterator[tuple[TrackKey, np.ndarray]]:
    """The rows of each distinct key, in key order, each ascending."""
    if keys.shape[0] == 0:
        return
    if (keys == keys[0]).all():
        yield decode(int(keys[0])), np.arange(keys.shape[0])
        return
    low = int(keys.min())
    if int(keys.max()) - low < 1 << 16:
        # A stable sort of 16-bit codes is a radix sort; a count per code gives the runs.
        codes = (keys - low).astype(np.uint16)
        order = np.argsort(codes, kind="stable")
        counts = np.bincount(codes)
        present = np.flatnonzero(counts)
        ends = np.cumsum(counts[present]).tolist()
        for code, a, b in zip(present.tolist(), [0, *ends[:-1]], ends, strict=True):
            yield decode(low + code), order[a:b]
        return
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    cuts = np.flatnonzero(sorted_keys[1:] != sorted_keys[:-1]) + 1
    bounds = [0, *cuts.tolist(), int(keys.shape[0])]
    for a, b in itertools.pairwise(bounds):
        yield decode(int(sorted_keys[a])), order[a:b]
