"""The record window every analysis starts from: one columnar table over all jobs.

``prepare`` runs the shared preparation step (``tfprof.collector.timeline.prepare``: job and task
labels as on the timeline, clock shift, window, name interning), clips the records to
the analysis window, and tags every record with its job, its process and its physical
GPU (by UUID: CUDA ordinals are per process). The columns are numpy arrays with one
value per record; nothing here makes a Python object per record.

GPU activity (kernels, copies, memsets, syncs) is the main table, which every GPU
analysis reads; the host records (API calls, ranges, memory) are kept apart in
``RecordSet.host`` (``host_records``), and each GPU record carries its link to them: the
API call that launched it, the op it ran for, its launch latency and queue depth.
The table is ``record_set.RecordSet``; ``record_table.RecordTable`` fills it, one
process at a time.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, runtime_checkable

import numpy as np

from tfprof.collector.allocator import reusing_heap
from tfprof.collector.analysis.host_pass import BATCH_ROWS, ProcessSpan, read_host
from tfprof.collector.analysis.host_records import HostRecords
from tfprof.collector.analysis.record_set import HostSelector, RecordSet
from tfprof.collector.analysis.record_table import RecordTable
from tfprof.collector.errors import AnalysisError
from tfprof.collector.jobdata import JobData, StreamData
from tfprof.collector.read.refs import (
    JobRef,
    ProcessRef,
    SampleStats,
    host_stats,
    job_ref,
    sample_stats,
)
from tfprof.collector.timeline.prepare import (
    TimeWindow,
    job_labels,
    prepare_stream,
    task_labels,
)


def prepare(
    jobs: Sequence[JobData],
    since_ns: int | None = None,
    until_ns: int | None = None,
    *,
    host: bool = True,
    select: HostSelector | None = None,
    batch_rows: int | None = None,
) -> RecordSet:
    """All records of ``jobs`` overlapping ``[since_ns, until_ns)``, clipped to it.

    Without bounds the window runs from the first record's start to the last one's end.
    Streams read from the lake (``Deferred``) are loaded one process at a time and
    released once its rows are in the table, so only the table stays whole. Without
    ``host``, API calls, ranges and memory records are left out (``RecordSet.host`` is
    empty, no GPU record is linked): the GPU-only views and rules need none of them.
    With ``select``, the host side is streamed in batches of ``batch_rows`` once the
    GPU table is whole (``prepare_gpu_first``, ``GpuFirst``).
    """
    if select is not None and host:
        return prepare_gpu_first(jobs, since_ns, until_ns).read(select, batch_rows or BATCH_ROWS)
    return _prepare(jobs, since_ns, until_ns, linked=host).rs


@dataclass
class GpuFirst:
    """A GPU table read by ``prepare_gpu_first`` (``rs``) and its host side, not read
    yet (``read``). It holds the table so that what no later reader needs can be
    released from it (``release``): the caller keeps no other reference."""

    rs: RecordSet
    _table: RecordTable
    _spans: tuple[ProcessSpan, ...]
    _window: TimeWindow

    def release(self, columns: Sequence[str]) -> None:
        """Free the GPU table's ``columns``: each reads as zeros from then on (what only
        the GPU rules read, before the host side is)."""
        n = len(self.rs)
        zeros: dict[str, Any] = {}  # replace() checks the names are RecordSet's fields
        for c in columns:
            zeros[c] = np.broadcast_to(np.zeros(1, getattr(self.rs, c).dtype), (n,))
        self.rs = replace(self.rs, **zeros)

    def read(self, select: HostSelector, batch_rows: int = BATCH_ROWS) -> RecordSet:
        """The GPU table with the host side streamed past ``select`` in batches of
        ``batch_rows`` (``host_pass``), also ``rs`` from then on: ``RecordSet.host``
        holds only the rows it keeps, GPU records are linked to their calls
        (``RecordSet.calls``) but not attributed to ops (``op`` and ``queue`` are -1):
        what the advice rules read, without holding any process's host side whole."""
        self.rs = read_host(self.rs, self._table, self._spans, self._window, select, batch_rows)
        return self.rs


def prepare_gpu_first(
    jobs: Sequence[JobData], since_ns: int | None = None, until_ns: int | None = None
) -> GpuFirst:
    """The GPU table (as ``prepare(host=False)``) and its host side, read only when
    asked (``GpuFirst.read``): what reads the GPU records alone (the GPU rules) runs,
    and frees what it made, before any host record is read."""
    return _prepare(jobs, since_ns, until_ns, linked=False)


def _prepare(
    jobs: Sequence[JobData], since_ns: int | None, until_ns: int | None, linked: bool
) -> GpuFirst:
    """``prepare`` without a selector; with ``linked`` the host side is read with the
    GPU records and linked to them, else left out (to be read by ``GpuFirst.read``)."""
    if since_ns is not None and until_ns is not None and since_ns >= until_ns:
        raise AnalysisError(f"the window is empty: since {since_ns} >= until {until_ns} (ns)")
    window = TimeWindow(since_ns, until_ns)
    table = RecordTable()
    job_refs: list[JobRef] = []
    processes: list[ProcessRef] = []
    spans: list[ProcessSpan] = []
    # Process after process, columns of about the same sizes made and freed.
    with reusing_heap():
        for j, (job, label) in enumerate(zip(jobs, job_labels(jobs), strict=True)):
            # Streams of one process (a reconnect) share a task label and correlation ids.
            by_task: dict[str, list[tuple[StreamData, str, int]]] = {}
            for stream, task in zip(job.streams, task_labels(job), strict=True):
                processes.append(ProcessRef(j, task, stream.host, stream.pid))
                by_task.setdefault(task, []).append((stream, task, len(processes) - 1))
            samples: dict[int, SampleStats | None] = {}
            for group in by_task.values():
                lo = table.gpu_rows
                with _loaded([s for s, _, _ in group], linked):
                    prepared = [
                        (prepare_stream(s, window, label, task), process)
                        for s, task, process in group
                    ]
                    table.add(prepared, window, j, linked)
                    for s, _, process in group:
                        samples[process] = sample_stats(s, window)
                del prepared
                spans.append(ProcessSpan(j, tuple(group), label, lo, table.gpu_rows))
            job_refs.append(job_ref(job, label, host_stats([samples[p] for p in sorted(samples)])))
    columns = table.columns()
    host_records = HostRecords(**table.host_columns())
    starts, ends = columns["start"], columns["end"]
    # Without records (no GPU activity) the host samples still span the run.
    sampled = [j.host for j in job_refs if j.host.samples]
    first = min([int(starts.min())] if starts.shape[0] else [h.start_ns for h in sampled] or [0])
    last = max([int(ends.max())] if ends.shape[0] else [h.end_ns for h in sampled] or [first])
    lo = since_ns if since_ns is not None else first
    hi = until_ns if until_ns is not None else max(last, lo)
    rs = RecordSet(
        jobs=tuple(job_refs),
        processes=tuple(processes),
        gpus=tuple(table.gpus),
        names=table.names.names,
        start_ns=lo,
        end_ns=hi,
        host=host_records,
        memory_gpus=tuple(table.memory_gpus.gpus),
        memory_base=tuple((j, g, b) for (j, g), b in sorted(table.memory_base.items()) if b),
        calls=None,
        **columns,
    )
    return GpuFirst(rs, table, tuple(spans), window)


@runtime_checkable
class Deferred(Protocol):
    """A stream whose records are read only while ``loaded`` (lake/lake_stream.py): with
    ``host`` its host records too, of its record columns only ``columns``."""

    def loaded(
        self, host: bool = True, columns: Sequence[str] = ...
    ) -> contextlib.AbstractContextManager[None]: ...


# The record columns each kind of read uses: GPU records only; everything (linking, op
# attribution, the host views).
_GPU_READ = (
    "start_ns", "duration_ns", "device", "stream", "correlation", "name", "bytes",
    "copy_kind", "src_kind", "dst_kind", "sync_type",
)  # fmt: skip
_ALL_READ = (*_GPU_READ, "thread", "memory_op", "return_value", "external_id", "category")


@contextlib.contextmanager
def _loaded(streams: Sequence[StreamData], host: bool) -> Iterator[None]:
    columns = _ALL_READ if host else _GPU_READ
    with contextlib.ExitStack() as stack:
        for stream in streams:
            if isinstance(stream, Deferred):
                stack.enter_context(stream.loaded(host, columns))
        yield
