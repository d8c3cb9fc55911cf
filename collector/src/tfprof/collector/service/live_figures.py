"""Per-job, per-GPU figures of what is being ingested now: what `top` and Grafana show.

Every stored batch adds, per (job, host, GPU): kernel busy time, kernel count, copies and
copied bytes per direction; every stream adds its drops per job and counts as one live
process while open. A GPU is its device UUID from the stream's hello and batches, else
``host/gpu:N`` (as ``StreamData.device_uuid`` names it). What one batch adds, and how busy time is
counted, is ``batch_figures``'s.

Label cardinality is bounded: a job whose last process closed is forgotten ``retain_s``
after (long enough for scrapes to see its final figures); at most ``max_jobs`` jobs
(finished ones are forgotten first to make room) and ``max_gpus`` GPUs per job are kept,
and what would pass a bound is added under the job or GPU ``<other>`` (not a valid job
name, so it cannot collide with one).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from tfprof.collector.service.batch_figures import GpuFigures, GpuUnion, StreamKey, batch_figures
from tfprof.proto import collector_pb2 as pb

OTHER = "<other>"
RETAIN_S = 300.0
MAX_JOBS = 1000
MAX_GPUS = 64

GpuKey = tuple[str, str]  # (host, gpu uuid)


@dataclass
class JobFigures:
    processes: int = 0  # streams open now
    dropped: dict[str, int] = field(default_factory=dict)  # reason -> records
    gpus: dict[GpuKey, GpuFigures] = field(default_factory=dict)
    finished_at: float | None = None  # clock() when its last stream closed

    def copy(self) -> JobFigures:
        gpus = {}
        for key, g in self.gpus.items():
            gpus[key] = GpuFigures(
                g.busy_ns, g.kernels, dict(g.copies), dict(g.copy_bytes), g.stream_busy_ns
            )
        return JobFigures(self.processes, dict(self.dropped), gpus, self.finished_at)


class StreamAccount:
    """One agent stream's share of the live figures; fed by ingest, one thread at a time."""

    def __init__(self, owner: LiveAccounting, hello: pb.Hello) -> None:
        self._owner = owner
        self.job = hello.job
        self.host = hello.host
        self._uuids: dict[int, str] = {}
        self._learn(hello.devices)
        self._covered: dict[StreamKey, int] = {}
        self._unions: dict[int, GpuUnion] = {}
        self._open = True

    def _learn(self, devices: Iterable[pb.Device]) -> None:
        for d in devices:
            if d.uuid:
                self._uuids[d.ordinal] = d.uuid

    def gpu(self, ordinal: int) -> GpuKey:
        return self.host, self._uuids.get(ordinal, f"{self.host}/gpu:{ordinal}")

    def batch_stored(self, batch: pb.Batch) -> None:
        self._learn(batch.devices)
        figures = batch_figures(batch.records, self._covered, self._unions)
        if figures:
            self._owner.add(self.job, {self.gpu(o): f for o, f in figures.items()})

    def dropped(self, reason: str, count: int) -> None:
        if count > 0:
            self._owner.add_dropped(self.job, reason, count)

    def close(self) -> None:
        if self._open:
            self._open = False
            self._owner.stream_closed(self.job)


class LiveAccounting:
    """The figures of every job seen lately; thread-safe (ingest runs on many threads)."""

    def __init__(
        self,
        retain_s: float = RETAIN_S,
        max_jobs: int = MAX_JOBS,
        max_gpus: int = MAX_GPUS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.retain_s = retain_s
        self.max_jobs = max_jobs
        self.max_gpus = max_gpus
        self._clock = clock
        self._jobs: dict[str, JobFigures] = {}
        self._lock = threading.Lock()

    def open_stream(self, hello: pb.Hello) -> StreamAccount:
        account = StreamAccount(self, hello)
        with self._lock:
            self._prune()
            job = self._job(account.job)
            job.processes += 1
            job.finished_at = None
            account.job = self._label(account.job)
        return account

    def add(self, job: str, per_gpu: dict[GpuKey, GpuFigures]) -> None:
        with self._lock:
            figures = self._job(job)
            for key, add in per_gpu.items():
                if key not in figures.gpus and len(figures.gpus) >= self.max_gpus:
                    key = (key[0], OTHER)
                figures.gpus.setdefault(key, GpuFigures()).add(add)

    def add_dropped(self, job: str, reason: str, count: int) -> None:
        with self._lock:
            dropped = self._job(job).dropped
            dropped[reason] = dropped.get(reason, 0) + count

    def stream_closed(self, job: str) -> None:
        with self._lock:
            figures = self._job(job)
            figures.processes = max(0, figures.processes - 1)
            if figures.processes == 0:
                figures.finished_at = self._clock()

    def snapshot(self) -> dict[str, JobFigures]:
        """A copy of every job's figures, finished jobs past ``retain_s`` left out."""
        with self._lock:
            self._prune()
            return {name: job.copy() for name, job in self._jobs.items()}

    # -- under the lock ------------------------------------------------------------------

    def _label(self, job: str) -> str:
        return job if job in self._jobs else OTHER

    def _job(self, job: str) -> JobFigures:
        figures = self._jobs.get(job)
        if figures is None:
            if len(self._jobs) >= self.max_jobs:
                self._evict_one_finished()
            if len(self._jobs) >= self.max_jobs:
                job = OTHER
            figures = self._jobs.setdefault(job, JobFigures())
        return figures

    def _evict_one_finished(self) -> None:
        finished = [
            (j.finished_at, name) for name, j in self._jobs.items() if j.finished_at is not None
        ]
        if finished:
            del self._jobs[min(finished)[1]]

    def _prune(self) -> None:
        limit = self._clock() - self.retain_s
        for name, job in list(self._jobs.items()):
            if job.finished_at is not None and job.finished_at < limit:
                del self._jobs[name]


def live_reply(snapshot: dict[str, JobFigures]) -> pb.LiveFiguresReply:
    """``LiveAccounting.snapshot()`` as the LiveFigures reply: the same figures the
    tfprof_* metric families expose, jobs and GPUs in name order."""
    reply = pb.LiveFiguresReply()
    for job, figures in sorted(snapshot.items()):
        out = reply.jobs.add(job=job, processes=figures.processes)
        for reason, n in sorted(figures.dropped.items()):
            out.dropped.add(reason=reason, records=n)
        for (host, uuid), gpu in sorted(figures.gpus.items()):
            g = out.gpus.add(host=host, gpu_uuid=uuid, busy_ns=gpu.busy_ns, kernels=gpu.kernels,
                             stream_busy_ns=gpu.stream_busy_ns)  # fmt: skip
            for direction, n in sorted(gpu.copies.items()):
                g.copies.add(direction=direction, copies=n, bytes=gpu.copy_bytes.get(direction, 0))
    return reply
