"""A task's device-memory counters and the peaks per job and physical GPU."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tfprof.collector.timeline.memory_levels import MemorySeries, memory_series, peak_of
from tfprof.collector.timeline.merge_tasks import MergeTask
from tfprof.core.records import RecordKind


def task_memory_series(task: MergeTask) -> list[MemorySeries]:
    """The task's device-memory series, one per device, on the collector clock."""
    kinds = [s.kind for s in task.sources]
    if not any((k == RecordKind.MEMORY).any() for k in kinds):
        return []
    cols = {
        c: np.concatenate([s.prep.column(c) for s in task.sources])
        for c in ("device", "memory_op", "bytes")
    }
    start = np.concatenate([s.prep.start for s in task.sources])
    return memory_series(
        np.concatenate(kinds), start, cols["device"], cols["memory_op"], cols["bytes"]
    )


def memory_peaks(
    memory: Sequence[tuple[MergeTask, list[MemorySeries]]],
) -> dict[str, dict[str, int]]:
    """Peak device memory per job label and physical GPU (its processes summed)."""
    by_gpu: dict[str, dict[str, list[MemorySeries]]] = {}
    for task, series in memory:
        stream = task.streams[0][1]
        for one in series:
            uuid = stream.device_uuid(one.device)
            by_gpu.setdefault(task.job_label, {}).setdefault(uuid, []).append(one)
    return {
        job: {uuid: peak_of(parts) for uuid, parts in gpus.items()} for job, gpus in by_gpu.items()
    }
