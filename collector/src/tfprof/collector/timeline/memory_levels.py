"""Device memory over time from MEMORY records (CUPTI MEMORY2, Kineto ``[memory]``).

An allocation adds its bytes, a release takes them away; the running sum per device is
the memory the traced process(es) held through the allocator calls traced. Memory
allocated before tracing began is not seen, so a series can go below zero when such a
block is freed; the peak is the highest point of the running sum.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from tfprof.core.records import RecordKind

MEMORY_ALLOCATION, MEMORY_RELEASE = 1, 2  # CUpti_ActivityMemoryOperationType


@dataclass(frozen=True)
class MemorySeries:
    """Bytes allocated on one device after each allocation or release, in time order."""

    device: int
    time_ns: np.ndarray
    allocated: np.ndarray

    @property
    def peak(self) -> int:
        return int(self.allocated.max()) if self.allocated.shape[0] else 0


def memory_deltas(kind: np.ndarray, memory_op: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
    """Signed byte change of each row: +bytes per allocation, -bytes per release, else 0."""
    sign = np.where(memory_op == MEMORY_ALLOCATION, 1, np.where(memory_op == MEMORY_RELEASE, -1, 0))
    delta: np.ndarray = np.where(kind == RecordKind.MEMORY, sign * nbytes, 0)
    return delta


def memory_series(
    kind: np.ndarray,
    time_ns: np.ndarray,
    device: np.ndarray,
    memory_op: np.ndarray,
    nbytes: np.ndarray,
) -> list[MemorySeries]:
    """One series per device that has MEMORY rows among these (one process or a job's)."""
    rows = np.flatnonzero(kind == RecordKind.MEMORY)
    out: list[MemorySeries] = []
    for dev in np.unique(device[rows]).tolist():
        mine = rows[device[rows] == dev]
        mine = mine[np.argsort(time_ns[mine], kind="stable")]
        delta = memory_deltas(kind[mine], memory_op[mine], nbytes[mine])
        out.append(MemorySeries(int(dev), time_ns[mine], np.cumsum(delta)))
    return out


def peak_of(series: Iterable[MemorySeries]) -> int:
    """The peak of several processes' series on one device, summed at every instant."""
    parts = list(series)
    if not parts:
        return 0
    time = np.concatenate([s.time_ns for s in parts])
    delta = np.concatenate([np.diff(s.allocated, prepend=0) for s in parts])
    order = np.argsort(time, kind="stable")
    return int(np.cumsum(delta[order]).max())
