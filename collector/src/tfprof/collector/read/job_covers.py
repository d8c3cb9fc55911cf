"""How much of some records' time a union covered on the same GPU, per job, with
carried state (``carried_unions.Unions.ask``): the host<->device copies a kernel ran
during (copy-overlap), and the host's waits (syncs) during which the GPU was busy
(sync-stalls)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tfprof.collector.read.carried_unions import Unions
from tfprof.collector.read.engine import Read
from tfprof.collector.read.time_chunks import Chunk

KERNEL, COPY, SYNC = 1, 2, 4
HOST_DEVICE = (1, 2)  # copy kinds HtoD, DtoH


@dataclass(frozen=True)
class JobCovers:
    """Per job: ns of its host<->device copies during which a kernel ran on their GPU
    (``copies``), and of its syncs during which the GPU was busy with anything
    (``syncs``); arrays indexed by job."""

    tables: frozenset[str] = frozenset({"kernels", "copies", "memsets", "syncs"})
    columns: frozenset[str] = frozenset({"device", "copy_kind"})

    def start(self, read: Read) -> _JobCoversState:
        return _JobCoversState(read)


@dataclass(frozen=True)
class Covered:
    copies: np.ndarray
    syncs: np.ndarray


class _JobCoversState:
    def __init__(self, read: Read) -> None:
        self.read = read
        n = max(len(read.jobs), 1)
        self.kernels = Unions(0, read.start_ns, 0)
        self.busy = Unions(0, read.start_ns, 0)
        self.kernels.answers = np.zeros(n, dtype=np.int64)
        self.busy.answers = np.zeros(n, dtype=np.int64)
        self.job_of = np.array([p.job for p in read.processes], dtype=np.int64)

    def feed(self, chunk: Chunk) -> None:
        kind = chunk["kind"]
        gpu = self.read.gpu_keys(chunk["process"], chunk["device"])
        n = len(self.read.gpu_keys.uuids)
        self.kernels.grow(n)
        self.busy.grow(n)
        job = self.job_of[chunk["process"]]
        s, e = chunk["s"], chunk["e"]
        # Asked before the chunk is fed: its own islands answer them.
        copies = np.flatnonzero((kind == COPY) & np.isin(chunk["copy_kind"], HOST_DEVICE))
        self.kernels.ask(gpu[copies], e[copies], job[copies], +1)
        self.kernels.ask(gpu[copies], s[copies], job[copies], -1)
        syncs = np.flatnonzero(kind == SYNC)
        self.busy.ask(gpu[syncs], e[syncs], job[syncs], +1)
        self.busy.ask(gpu[syncs], s[syncs], job[syncs], -1)
        k = kind == KERNEL
        self.kernels.feed(gpu[k], s[k], e[k], chunk.bound)
        on = kind != SYNC
        self.busy.feed(gpu[on], s[on], e[on], chunk.bound)

    def finish(self) -> Covered:
        self.kernels.finish()
        self.busy.finish()
        return Covered(self.kernels.answers, self.busy.answers)
