"""The columnar table every analysis reads (``RecordSet``): one row per GPU record of
the analysed jobs, clipped to the analysis window and tagged with its job, process and
physical GPU, with the host records kept apart in ``RecordSet.host``. Also what a
streamed host side keeps (``HostSelector``) and the GPUs' busy intervals (``gpu_busy``).
``records.prepare`` makes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from tfprof.collector.analysis.clipped_rows import ProcessHost
from tfprof.collector.analysis.host_records import HostRecords, LaunchCalls
from tfprof.collector.analysis.intervals import Merged, merge_intervals
from tfprof.collector.read.refs import GpuRef, JobRef, ProcessRef
from tfprof.core.records import RecordKind
from tfprof.core.tracks import TrackKey

# Kinds that occupy the GPU; SYNC records are host waits and never count as busy.
GPU_KINDS = (RecordKind.KERNEL, RecordKind.MEMCPY, RecordKind.MEMSET)


@dataclass(frozen=True)
class RecordSet:
    """Every record of the analysed jobs inside ``[start_ns, end_ns)``, clipped to it.

    ``start``/``end`` are absolute collector-clock nanoseconds. ``job``, ``process`` and
    ``gpu`` index ``jobs``, ``processes`` and ``gpus``; ``name`` indexes ``names``.
    Those and ``device`` are held in the smallest signed type that fits (int8 where few):
    cast to int64 before combining them into keys.
    """

    jobs: tuple[JobRef, ...]
    processes: tuple[ProcessRef, ...]
    gpus: tuple[GpuRef, ...]
    names: tuple[str, ...]
    start_ns: int  # the analysis window
    end_ns: int
    kind: np.ndarray
    start: np.ndarray
    end: np.ndarray
    job: np.ndarray
    process: np.ndarray
    gpu: np.ndarray
    device: np.ndarray  # CUDA ordinal inside the process
    stream: np.ndarray
    name: np.ndarray
    bytes: np.ndarray
    copy_kind: np.ndarray
    src_kind: np.ndarray
    dst_kind: np.ndarray
    sync_type: np.ndarray
    correlation: np.ndarray
    # The host side of each GPU record (``host_records.launches``): the ``host`` row of
    # the API call that launched it (-1: none found; a row of ``calls`` when that is
    # given), the ``names`` id of the op it ran for (-1: none), launch latency (ns,
    # unclipped times) and stream queue depth (-1).
    api: np.ndarray
    op: np.ndarray
    latency: np.ndarray
    queue: np.ndarray
    host: HostRecords
    memory_gpus: tuple[GpuRef, ...] = ()  # the GPUs of host MEMORY rows (``host.gpu``)
    # Bytes each (job, memory_gpus index) held before the window began (memory view).
    memory_base: tuple[tuple[int, int, int], ...] = ()
    # The calls ``api`` points to when ``host`` does not hold them (``host_pass``).
    calls: LaunchCalls | None = None

    def __len__(self) -> int:
        return int(self.kind.shape[0])

    @property
    def window_ns(self) -> int:
        return max(0, self.end_ns - self.start_ns)

    @property
    def duration(self) -> np.ndarray:
        duration: np.ndarray = self.end - self.start
        return duration

    def mask(self, *kinds: int) -> np.ndarray:
        """Which records are of one of ``kinds``."""
        if len(kinds) == 1:
            one: np.ndarray = self.kind == kinds[0]
            return one
        return np.isin(self.kind, np.array(kinds, dtype=self.kind.dtype))

    def launch_calls(self) -> LaunchCalls:
        """Duration and name of the calls ``api`` points to."""
        if self.calls is not None:
            return self.calls
        return LaunchCalls(self.host.duration, self.host.name)

    def track(self, process: int, device: int, stream: int) -> TrackKey:
        """The timeline track of records of ``process`` on ``device`` and ``stream``."""
        ref = self.processes[process]
        return TrackKey.for_stream(self.jobs[ref.job].label, ref.task, device, stream)


class HostSelector(Protocol):
    """What a streamed host side keeps (``analysis.host_pass``, ``advice.host_rows``):
    it sees the GPU table first, then each process's host rows in batches (API calls
    before ranges, ranges before memory records), each process once, in order."""

    def start(self, rs: RecordSet, /) -> None:
        """The GPU table, whole and unlinked, before any host row."""

    def __call__(self, rows: ProcessHost, /) -> np.ndarray:
        """Which rows of the batch ``RecordSet.host`` keeps (a boolean mask)."""

    def end_process(self) -> None:
        """The process's last batch has been seen."""

    def end(self) -> None:
        """Every process has been seen (what the selector gathered is complete)."""


def gpu_busy(rs: RecordSet) -> Merged:
    """Busy intervals of each physical GPU: the union of its kernels, copies, memsets."""
    on_gpu = np.flatnonzero(rs.mask(*GPU_KINDS))
    return merge_intervals(rs.gpu, rs.start, rs.end, len(rs.gpus), rows=on_gpu)
