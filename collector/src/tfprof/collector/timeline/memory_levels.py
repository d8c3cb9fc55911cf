"""Device memory over time from MEMORY records (CUPTI MEMORY2, Kineto ``[memory]``).

An allocation adds its bytes, a release takes them away; the running sum per device is
the memory the traced process(es) held through the allocator calls traced. Memory
allocated before tracing began is not seen, so a level can go below zero when such a
block is freed; the peak is the highest level reached after a record.

The timeline carries the levels from chunk to chunk (records in time order): one
counter per task and GPU ordinal (``gpu:N allocated_bytes``), and per job and physical
GPU the peak of its processes' levels summed (the metadata's ``memory_peak_bytes``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from tfprof.collector.timeline.model import CounterTrack
from tfprof.core.records import RecordKind

if TYPE_CHECKING:
    from tfprof.collector.merged.plan import TimelinePlan

MEMORY_ALLOCATION, MEMORY_RELEASE = 1, 2  # CUpti_ActivityMemoryOperationType


def memory_deltas(kind: np.ndarray, memory_op: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
    """Signed byte change of each row: +bytes per allocation, -bytes per release, else 0."""
    sign = np.where(memory_op == MEMORY_ALLOCATION, 1, np.where(memory_op == MEMORY_RELEASE, -1, 0))
    delta: np.ndarray = np.where(kind == RecordKind.MEMORY, sign * nbytes, 0)
    return delta


class MemoryLevels:
    """The memory counters' samples a chunk at a time, and the peaks per job and GPU."""

    def __init__(self, plan: TimelinePlan) -> None:
        self.plan = plan
        self._level: dict[int, int] = {}  # (task << 16 | device) -> running total
        self._job_level: dict[tuple[str, str], int] = {}  # (job label, GPU UUID)
        self._peak: dict[tuple[str, str], int] = {}

    def chunk(
        self, cols: Mapping[str, np.ndarray], relative: np.ndarray
    ) -> tuple[CounterTrack, ...]:
        """The counter samples of the chunk's MEMORY records (``relative``: every row's
        start, relative to the origin)."""
        kind = cols["kind"]
        memory = np.flatnonzero(kind == RecordKind.MEMORY)
        if not memory.shape[0]:
            return ()
        plan = self.plan
        delta = memory_deltas(kind[memory], cols["memory_op"][memory], cols["bytes"][memory])
        task = plan.found.rows.task_of[cols["process"][memory]]
        code = (task << 16) | cols["device"][memory]
        out = []
        by_gpu: dict[tuple[str, str], list[np.ndarray]] = {}
        for key in np.unique(code).tolist():
            rows = np.flatnonzero(code == key)
            t, device = key >> 16, key & 0xFFFF
            levels = self._level.get(key, 0) + np.cumsum(delta[rows])
            self._level[key] = int(levels[-1])
            index = plan.memory_counters[(t, device)]
            place = plan.layout.counters[index]
            out.append(CounterTrack(index, place.pid, place.tid, place.name,
                                    relative[memory[rows]], levels))  # fmt: skip
            owner = plan.tasks[t]
            uuid = plan.cat.streams[owner.processes[0]].device_uuid(device)
            by_gpu.setdefault((owner.job_label, uuid), []).append(rows)
        for gpu, parts in by_gpu.items():
            rows = np.sort(np.concatenate(parts))  # the job's processes' records in time order
            levels = self._job_level.get(gpu, 0) + np.cumsum(delta[rows])
            self._job_level[gpu] = int(levels[-1])
            peak = int(levels.max())
            self._peak[gpu] = max(self._peak.get(gpu, peak), peak)
        return tuple(out)

    def peaks(self) -> dict[str, dict[str, int]]:
        """Peak device memory per job label and physical GPU (its processes summed)."""
        out: dict[str, dict[str, int]] = {}
        for (job, uuid), peak in self._peak.items():
            out.setdefault(job, {})[uuid] = peak
        return out
