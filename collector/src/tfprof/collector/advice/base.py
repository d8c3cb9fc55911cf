"""What every rule shares: the finding it reports and the context it reads.

A rule is a module with ``NAME`` and ``check(ctx) -> list[Finding]``, a pure function of
the record set. ``Context`` computes the costly pieces (busy intervals per GPU, per job
on a GPU, kernel intervals) once for all rules, and drops each once no rule left to
run reads it (``READERS``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

import numpy as np

from tfprof.collector.advice.stall_cover import StallCover, long_gaps, stall_cover_of
from tfprof.collector.advice.step_syncs import StepSyncs, step_syncs_of
from tfprof.collector.analysis.intervals import Gaps, Merged, merge_intervals
from tfprof.collector.analysis.records import GPU_KINDS, RecordSet, gpu_busy
from tfprof.collector.analysis.units import us
from tfprof.collector.read.captured_time import Captured
from tfprof.core.records import RecordKind
from tfprof.core.tracks import TrackKey


@dataclass(frozen=True)
class Finding:
    rule: str
    title: str
    # Time at stake (us), the ranking key: what the rule estimates could be won back.
    impact_us: float
    evidence: dict[str, Any]
    suggestion: str
    start_ns: int  # the time window the evidence comes from (collector clock)
    end_ns: int
    jobs: tuple[str, ...] = ()
    streams: tuple[str, ...] = field(default_factory=tuple)  # timeline track names (TrackKey)


class HostEvidence(Protocol):
    """What the host rules read of a host side streamed past them (``advice.host_rows``)
    instead of ``rs.host``."""

    def stall_cover(self) -> StallCover: ...

    def step_syncs(self) -> list[StepSyncs]: ...

    def long_gaps(self) -> Gaps: ...


# The rules (by NAME) that read each of Context's cached pieces, directly or through
# another piece: ``release`` drops a piece once none of the rules still to run reads it,
# so the GPU rules' unions, the largest pieces at scale, are not all held to the end. A
# piece asked for after its release is
# computed again: a reader missing here costs time, never a wrong finding.
READERS: dict[str, frozenset[str]] = {
    "kernels_by_gpu": frozenset({"gpu-idle", "copy-overlap"}),
    "gpu_busy": frozenset({"gpu-idle", "time-slicing", "sync-stalls", "host-stalls"}),
    "job_gpu_busy": frozenset({"time-slicing"}),
    "job_gpu_span": frozenset({"gpu-idle", "time-slicing", "host-stalls"}),
    "job_span": frozenset({"copy-overlap", "sync-stalls"}),
    "on_gpu": frozenset({"single-stream", "time-slicing", "host-stalls"}),
    "stall_cover": frozenset({"host-stalls"}),
    "long_gaps": frozenset({"host-stalls"}),
    "step_syncs": frozenset({"sync-per-step"}),
}


class Context:
    """``host``: the host rules' evidence when ``rs.host`` does not hold every host row
    (``advice.host_rows``); computed from ``rs.host`` otherwise."""

    def __init__(self, rs: RecordSet, host: HostEvidence | None = None) -> None:
        self.rs = rs
        self._host = host

    def release(self, rules_left: Iterable[str]) -> None:
        """Drop the cached pieces that none of ``rules_left`` (rule NAMEs) reads."""
        left = frozenset(rules_left)
        for piece, readers in READERS.items():
            if not readers & left:
                self.__dict__.pop(piece, None)  # a cached_property lives in __dict__

    @cached_property
    def stall_cover(self) -> StallCover:
        """host-stalls' long gaps, each with the time the job's host spent in CUDA calls."""
        if self._host is not None:
            return self._host.stall_cover()
        return stall_cover_of(self.rs, self.long_gaps)

    @cached_property
    def step_syncs(self) -> list[StepSyncs]:
        """Each process's synchronising calls counted in its steps (sync-per-step)."""
        if self._host is not None:
            return self._host.step_syncs()
        return step_syncs_of(self.rs)

    @cached_property
    def long_gaps(self) -> Gaps:
        """Long gaps in each job's work on each GPU (``stall_cover.long_gaps``); a
        streamed host side has them from the GPU table, found before its first host row."""
        if self._host is not None:
            return self._host.long_gaps()
        captured = [j.captured for j in self.rs.jobs]
        return long_gaps(self.job_gpu_merged(), *self.job_gpu_span, captured)

    @cached_property
    def on_gpu(self) -> np.ndarray:
        return self.rs.mask(*GPU_KINDS)

    @cached_property
    def gpu_busy(self) -> Merged:
        return gpu_busy(self.rs)

    @cached_property
    def kernels_by_gpu(self) -> Merged:
        rs = self.rs
        k = rs.kind == RecordKind.KERNEL
        return merge_intervals(rs.gpu[k], rs.start[k], rs.end[k], len(rs.gpus))

    @cached_property
    def job_gpu_busy(self) -> np.ndarray:
        """(jobs, gpus) busy ns: the union of each job's records on each GPU."""
        rs = self.rs
        n_jobs, n_gpus = len(rs.jobs), len(rs.gpus)
        if not n_jobs or not n_gpus:
            return np.zeros((n_jobs, n_gpus), dtype=np.int64)
        busy: np.ndarray = self.job_gpu_merged().busy.reshape(n_jobs, n_gpus)
        return busy

    def job_gpu_merged(self) -> Merged:
        """The union of each job's records on each GPU (group: job * GPUs + GPU; not
        kept). Where no two jobs share a GPU, those are the GPUs' busy intervals
        (``gpu_busy``) renumbered, without merging every record again."""
        rs = self.rs
        n_jobs, n_gpus = len(rs.jobs), max(len(rs.gpus), 1)
        lo, hi = self.job_gpu_span
        present = lo <= hi  # (jobs, gpus): the job has a record on the GPU
        used = np.flatnonzero(present.any(axis=0))
        if len(rs.gpus) and (present.sum(axis=0) <= 1).all():
            key = np.argmax(present, axis=0) * n_gpus + np.arange(n_gpus)  # per GPU
            if (np.diff(key[used]) > 0).all():  # the GPUs' order stays the groups' order
                gpus = self.gpu_busy
                busy = np.zeros(n_jobs * n_gpus, dtype=np.int64)
                busy[key[used]] = gpus.busy[used]
                return Merged(key[gpus.group], gpus.start, gpus.end, busy, n_jobs * n_gpus)
        on = np.flatnonzero(self.on_gpu)
        keys = rs.job[on].astype(np.int64) * n_gpus + rs.gpu[on]
        return merge_intervals(keys, rs.start[on], rs.end[on], n_jobs * n_gpus)

    @cached_property
    def job_gpu_span(self) -> tuple[np.ndarray, np.ndarray]:
        """(jobs, gpus) first start and last end of each job's GPU work (lo > hi: none)."""
        rs, m = self.rs, self.on_gpu
        n_jobs, n_gpus = len(rs.jobs), max(len(rs.gpus), 1)
        lo = np.full(n_jobs * n_gpus, np.iinfo(np.int64).max, dtype=np.int64)
        hi = np.full(n_jobs * n_gpus, np.iinfo(np.int64).min, dtype=np.int64)
        key = rs.job[m].astype(np.int64) * n_gpus + rs.gpu[m]
        np.minimum.at(lo, key, rs.start[m])
        np.maximum.at(hi, key, rs.end[m])
        return lo.reshape(n_jobs, n_gpus), hi.reshape(n_jobs, n_gpus)

    @cached_property
    def job_span(self) -> tuple[np.ndarray, np.ndarray]:
        """Per job: first start and last end of any record (GPU work and host waits)."""
        rs = self.rs
        n = len(rs.jobs)
        lo = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
        hi = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
        np.minimum.at(lo, rs.job, rs.start)
        np.maximum.at(hi, rs.job, rs.end)
        return lo, hi

    def track(self, process: int, device: int, stream: int) -> TrackKey:
        return self.rs.track(process, device, stream)

    def tracks_of(self, rows: np.ndarray, limit: int = 8) -> tuple[str, ...]:
        """Names of the timeline tracks of the given record rows (at most ``limit``,
        busiest first)."""
        rs = self.rs
        if rows.shape[0] == 0:
            return ()
        key = (
            (rs.process[rows].astype(np.int64) << 40)
            | (rs.device[rows].astype(np.int64) << 32)
            | rs.stream[rows]
        )
        keys, counts = np.unique(key, return_counts=True)
        order = np.argsort(-counts, kind="stable")[:limit]
        return tuple(
            self.track(k >> 40, (k >> 32) & 0xFF, k & 0xFFFFFFFF).format()
            for k in keys[order].tolist()
        )


def span_ns(captured: Captured | None, lo: int, hi: int, busy: Merged, group: int) -> int:
    """The time of ``[lo, hi)`` a job was traced in: all of it, or its part inside its
    capture windows (``captured``) plus what its busy intervals (``busy``'s ``group``)
    ran past their edges (a record captured in a window counts whole)."""
    if captured is None:
        return hi - lo
    mine = busy.group == group
    s = np.clip(busy.start[mine], lo, hi)
    e = np.clip(busy.end[mine], lo, hi)
    ran_past = int((e - s).sum() - captured.measure(s, e).sum())
    return captured.total(lo, hi) + ran_past


def share(part: float, whole: float) -> float:
    return round(100.0 * part / whole, 1) if whole else 0.0


__all__ = ["Context", "Finding", "share", "us"]
