"""The interval pieces the GPU views and rules share, as ``Sweep`` values: the busy
time of each GPU (with its longest idle gaps), of each job on each GPU, of each CUDA
stream, and the copy time a kernel on the same GPU covered.

Busy is the union of kernels, copies and memsets (never syncs: those are host waits);
percentages are of captured time (``Read.captured``: the windows the processes were
traced in, plus what a record captured in one ran past its edge; all of the window for
processes traced throughout), and gaps never span untraced time; results index the GPUs
the read lists (``Read.gpus``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tfprof.collector.read.carried_unions import Unions
from tfprof.collector.read.engine import Read
from tfprof.collector.read.time_chunks import Chunk
from tfprof.collector.timeline.captured_time import Captured

GPU_TABLES = frozenset({"kernels", "copies", "memsets", "syncs"})
KERNEL, COPY, SYNC = 1, 2, 4


@dataclass(frozen=True)
class GpuIdle:
    """Per listed GPU: busy ns, and its ``top_gaps`` longest idle gaps in the window; of
    captured time only (``captured_ns``: the window's, or its part the processes sharing
    the GPU were traced in)."""

    busy: np.ndarray  # per GPU
    gap_gpu: np.ndarray  # per gap kept: its GPU, start, length (ranked per GPU)
    gap_start: np.ndarray
    gap_length: np.ndarray
    captured_ns: np.ndarray  # per GPU


@dataclass(frozen=True)
class GpuBusy:
    """The union of each GPU's kernels, copies and memsets; with ``top_gaps``, its
    longest gaps too (``GpuIdle``)."""

    top_gaps: int = 0
    tables: frozenset[str] = GPU_TABLES
    columns: frozenset[str] = frozenset({"device"})

    def start(self, read: Read) -> _GpuBusyState:
        return _GpuBusyState(read, self.top_gaps)


class _GpuBusyState:
    def __init__(self, read: Read, top: int) -> None:
        self.read = read
        self.unions = Unions(0, read.start_ns, 0, top_gaps=top, captured=read.gpu_captured)

    def feed(self, chunk: Chunk) -> None:
        on = chunk["kind"] != SYNC
        key = self.read.gpu_keys(chunk["process"], chunk["device"])[on]
        self.unions.grow(len(self.read.gpu_keys.uuids))
        self.unions.feed(key, chunk["s"][on], chunk["e"][on], chunk.bound)

    def finish(self) -> GpuIdle:
        self.unions.hi = self.read.end_ns
        self.unions.grow(len(self.read.gpu_keys.uuids))
        busy, (gk, gs, gl) = self.unions.finish()
        listed = self.read.listed_gpu()
        shown = listed[gk] >= 0 if gk.shape[0] else np.zeros(0, dtype=bool)
        out = np.zeros(len(self.read.gpus), dtype=np.int64)
        captured = np.full(len(self.read.gpus), self.read.window_ns, dtype=np.int64)
        known = listed[: busy.shape[0]] >= 0
        out[listed[: busy.shape[0]][known]] = busy[known]
        for key in np.flatnonzero(known).tolist():
            windows = self.read.gpu_captured(key)
            ran_past = int(self.unions.outside[key])
            captured[listed[key]] = self.read.captured_ns(windows) + ran_past
        return GpuIdle(out, listed[gk[shown]], gs[shown], gl[shown], captured)


@dataclass(frozen=True)
class JobGpuBusy:
    """Per (listed GPU, job): the union of the job's kernels, copies and memsets there
    (an array of GPUs x jobs)."""

    tables: frozenset[str] = GPU_TABLES
    columns: frozenset[str] = frozenset({"device"})

    def start(self, read: Read) -> _JobGpuBusyState:
        return _JobGpuBusyState(read)


class _JobGpuBusyState:
    def __init__(self, read: Read) -> None:
        self.read = read
        self.n_jobs = max(len(read.jobs), 1)
        self.job_of = np.array([p.job for p in read.processes], dtype=np.int64)
        self.unions = Unions(0, read.start_ns, 0, captured=self._captured)

    def _captured(self, key: int) -> Captured | None:
        """The job's processes among those sharing the GPU: their windows."""
        gpu, job = divmod(key, self.n_jobs)
        process = self.read.gpu_keys.process_of[gpu]
        component = next(c for c in self.read.components if process in c)
        return self.read.captured([p for p in component if self.job_of[p] == job])

    def feed(self, chunk: Chunk) -> None:
        on = chunk["kind"] != SYNC
        gpu = self.read.gpu_keys(chunk["process"], chunk["device"])[on]
        self.unions.grow(len(self.read.gpu_keys.uuids) * self.n_jobs)
        key = gpu * self.n_jobs + self.job_of[chunk["process"][on]]
        self.unions.feed(key, chunk["s"][on], chunk["e"][on], chunk.bound)

    def finish(self) -> np.ndarray:
        self.unions.grow(len(self.read.gpu_keys.uuids) * self.n_jobs)
        busy = self.unions.finish()[0].reshape(-1, self.n_jobs)
        listed = self.read.listed_gpu()
        out = np.zeros((len(self.read.gpus), len(self.read.jobs)), dtype=np.int64)
        known = listed[: busy.shape[0]] >= 0
        out[listed[: busy.shape[0]][known]] = busy[known][:, : len(self.read.jobs)]
        return out


@dataclass(frozen=True)
class StreamBusy:
    """Per (process, CUDA ordinal, CUDA stream) with a record: the union of its kernels,
    copies and memsets, and the window's captured time it is a share of
    ({(process, device, stream): (busy ns, captured ns)})."""

    tables: frozenset[str] = GPU_TABLES
    columns: frozenset[str] = frozenset({"device", "stream"})

    def start(self, read: Read) -> _StreamBusyState:
        return _StreamBusyState(read)


class DenseIds:
    """Dense ids (0, 1, ...) for int64 codes, in order of first sight."""

    def __init__(self) -> None:
        self.codes = np.zeros(0, dtype=np.int64)  # sorted
        self._ids = np.zeros(0, dtype=np.int64)  # per sorted code, its id
        self.order: list[int] = []  # codes by id

    def __call__(self, codes: np.ndarray) -> np.ndarray:
        at = np.searchsorted(self.codes, codes)
        known = at < self.codes.shape[0]
        known[known] = self.codes[at[known]] == codes[known]
        if not known.all():
            for code in np.unique(codes[~known]).tolist():
                self.order.append(int(code))
            order = np.array(self.order, dtype=np.int64)
            sort = np.argsort(order, kind="stable")
            self.codes, self._ids = order[sort], sort.astype(np.int64)
            at = np.searchsorted(self.codes, codes)
        ids: np.ndarray = self._ids[at]
        return ids

    def __len__(self) -> int:
        return len(self.order)


def stream_code(process: Any, device: Any, stream: Any) -> Any:
    """(process, CUDA ordinal, CUDA stream) as one int64 (streams are uint32)."""
    return (process << 48) | (device << 32) | stream


class _StreamBusyState:
    def __init__(self, read: Read) -> None:
        self.read = read
        self.unions = Unions(0, read.start_ns, 0, captured=self._captured)
        self.ids = DenseIds()

    def _captured(self, key: int) -> Captured | None:
        return self.read.captured([self.ids.order[key] >> 48])

    def feed(self, chunk: Chunk) -> None:
        on = chunk["kind"] != SYNC
        code = stream_code(
            chunk["process"][on].astype(np.int64), chunk["device"][on], chunk["stream"][on]
        )
        key = self.ids(code)
        self.unions.grow(len(self.ids))
        self.unions.feed(key, chunk["s"][on], chunk["e"][on], chunk.bound)

    def finish(self) -> dict[tuple[int, int, int], tuple[int, int]]:
        """{(process, device, stream): (busy ns, captured ns of the window)}."""
        busy = self.unions.finish()[0]
        out = {}
        for i, code in enumerate(self.ids.order):
            process = code >> 48
            captured = self.read.captured_ns(self.read.captured([process]))
            captured += int(self.unions.outside[i])
            out[(process, (code >> 32) & 0xFFFF, code & 0xFFFFFFFF)] = (int(busy[i]), captured)
        return out


@dataclass(frozen=True)
class CopyCover:
    """Per copy group (copy kind, source memory kind, destination memory kind): the copy
    time during which a kernel ran on the same GPU ({(kind, src, dst): ns})."""

    tables: frozenset[str] = frozenset({"kernels", "copies"})
    columns: frozenset[str] = frozenset({"device", "copy_kind", "src_kind", "dst_kind"})

    def start(self, read: Read) -> _CopyCoverState:
        return _CopyCoverState(read)


class _CopyCoverState:
    def __init__(self, read: Read) -> None:
        self.read = read
        self.kernels = Unions(0, read.start_ns, 0)
        self.groups = DenseIds()  # copy kind << 16 | src << 8 | dst

    def feed(self, chunk: Chunk) -> None:
        gpu = self.read.gpu_keys(chunk["process"], chunk["device"])
        self.kernels.grow(len(self.read.gpu_keys.uuids))
        copy = np.flatnonzero(chunk["kind"] == COPY)
        if copy.shape[0]:  # asked before the chunk is fed: its islands answer them
            code = ((chunk["copy_kind"][copy] << 16) | (chunk["src_kind"][copy] << 8)) | chunk[
                "dst_kind"
            ][copy]
            slot = self.groups(code)
            more = len(self.groups) - self.kernels.answers.shape[0]
            if more > 0:
                self.kernels.answers = np.append(self.kernels.answers, np.zeros(more, np.int64))
            self.kernels.ask(gpu[copy], chunk["e"][copy], slot, +1)
            self.kernels.ask(gpu[copy], chunk["s"][copy], slot, -1)
        k = chunk["kind"] == KERNEL
        self.kernels.feed(gpu[k], chunk["s"][k], chunk["e"][k], chunk.bound)

    def finish(self) -> dict[tuple[int, int, int], int]:
        self.kernels.finish()
        return {
            (c >> 16, (c >> 8) & 0xFF, c & 0xFF): int(self.kernels.answers[slot])
            for slot, c in enumerate(self.groups.order)
        }
