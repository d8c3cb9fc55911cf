"""The timeline's metadata: tool, jobs, tasks, devices, clocks and losses, as plain JSON data.

Every export carries it (Chrome's ``otherData``); it says where each track came from and
what the trace does not show (records outside the window, dropped records).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tfprof.collector.jobdata import DropCounts, JobData, StreamData
from tfprof.collector.store.traced_windows import ALWAYS, union_ns
from tfprof.collector.timeline.model import GroupBy
from tfprof.collector.timeline.prepare import PreparedStream, TimeWindow
from tfprof.core.records import RecordKind
from tfprof.core.version import __version__
from tfprof.readers.tfprof_chrome import TOOL_NAME

# "other": everything but kernels, copies and memsets (syncs and the host side), as
# before there was a host side; "api", "marker", "memory" count the host side alone;
# "gpu": the GPU records (kernels, copies, memsets, syncs), as ``jobs`` counts them.
_KIND_COUNTS = (
    "kernel", "memcpy", "memset", "api", "marker", "memory", "other", "total", "gpu",
)  # fmt: skip


def tool_tag() -> dict[str, str]:
    """What every export of ours names as its writer (``otherData.tool``)."""
    return {"name": TOOL_NAME, "version": __version__}


def _drop_dict(d: DropCounts) -> dict[str, int]:
    return {"queue": d.queue, "tracer": d.tracer, "relay": d.relay, "total": d.total}


def _count_kinds(kind: np.ndarray) -> dict[str, int]:
    top = RecordKind.MEMORY + 1  # anything beyond: a kind this version does not know
    counts = np.bincount(np.clip(kind, 0, top), minlength=top + 1)
    kernel, memcpy, memset = (
        int(counts[k]) for k in (RecordKind.KERNEL, RecordKind.MEMCPY, RecordKind.MEMSET)
    )
    total = int(kind.shape[0])
    return {
        "kernel": kernel,
        "memcpy": memcpy,
        "memset": memset,
        "api": int(counts[RecordKind.API]),
        "marker": int(counts[RecordKind.MARKER]),
        "memory": int(counts[RecordKind.MEMORY]),
        "other": total - kernel - memcpy - memset,
        "total": total,
        "gpu": kernel + memcpy + memset + int(counts[RecordKind.SYNC]),
    }


def _time_range(preps: Sequence[PreparedStream]) -> list[int] | None:
    live = [p for p in preps if len(p)]
    if not live:
        return None
    return [min(int(p.start.min()) for p in live), max(int(p.end.max()) for p in live)]


def _task_meta(prep: PreparedStream) -> dict[str, Any]:
    stream = prep.stream
    kind = prep.column("kind")
    return {
        "task": prep.task_label,
        "host": stream.host,
        "pid": stream.pid,
        "argv": list(stream.argv),
        "source": stream.source,
        "finished": stream.finished,
        "exit_code": stream.exit_code,
        "records": _count_kinds(kind),
        "records_outside_window": stream.num_records - int(kind.shape[0]),
        "time_range_ns": _time_range([prep]),
        "dropped": _drop_dict(stream.dropped),
        # Stored parts that could not be read, and the records they held (None: unknown).
        "skipped": list(stream.skipped),
        "records_lost": stream.lost_records,
        # The windows it was traced in (mode, capture ids, start, end; collector clock).
        "capture_windows": [list(w) for w in _windows(stream)],
    }


def _windows(stream: StreamData) -> list[tuple[str, str, int, int]]:
    """The stream's capture windows; one made of a stream that says none (merged trace
    files, jobs built in memory): traced throughout, its records' span."""
    if stream.capture_windows or not stream.num_records:
        return list(stream.capture_windows)
    start = stream.records["start_ns"] + np.int64(stream.record_shift_ns)
    end = start + np.maximum(stream.records["duration_ns"], 0)
    return [(ALWAYS, "", int(start.min()), int(end.max()))]


def _devices(stream: StreamData) -> dict[str, dict[str, Any]]:
    return {
        str(o): {
            "uuid": stream.device_uuid(o),
            "name": m.name,
            "pci_bus_id": m.pci_bus_id,
            "compute_capability": "{}.{}".format(*m.compute_capability),
            "sm_count": m.sm_count,
            "memory_bytes": m.memory_bytes,
        }
        for o, m in sorted(stream.devices.items())
    }


def _clock(stream: StreamData, job_label: str, task_label: str) -> dict[str, Any]:
    return {
        "job": job_label,
        "task": task_label,
        "host": stream.host,
        "pid": stream.pid,
        "record_shift_ns": stream.record_shift_ns + stream.applied_shifts_ns[0],
        "host_shift_ns": stream.host_shift_ns + stream.applied_shifts_ns[1],
        "clock_rtt_ns": stream.clock_rtt_ns,
    }


def device_metadata(
    jobs: Sequence[JobData], job_labels: Sequence[str], task_labels: Sequence[Sequence[str]]
) -> dict[str, dict[str, dict[str, dict[str, Any]]]]:
    """``metadata["devices"]``: per job label, per task label, per GPU ordinal; from the
    streams' hellos alone, so known before any record is read."""
    devices: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    for job, label, tasks in zip(jobs, job_labels, task_labels, strict=True):
        for stream, task in zip(job.streams, tasks, strict=True):
            devices.setdefault(label, {}).setdefault(task, {}).update(_devices(stream))
    return devices


class MetadataBuilder:
    """The timeline's metadata, gathered one stream at a time while the streams are
    loaded (``add``), complete once every stream was added (``finish``)."""

    def __init__(
        self,
        jobs: Sequence[JobData],
        job_labels: Sequence[str],
        task_labels: Sequence[Sequence[str]],
        group_by: GroupBy,
        origin: int,
        window: TimeWindow | None,
    ) -> None:
        self._jobs = jobs
        self._labels = job_labels
        self._task_labels = task_labels
        self._group_by = group_by
        self._origin = origin
        self._window = window
        # per job, per stream (job.streams order): its task meta, once added
        self._tasks: list[list[dict[str, Any] | None]] = [[None] * len(j.streams) for j in jobs]
        self._clamped = 0

    def add(self, job_index: int, stream_index: int, prep: PreparedStream) -> None:
        """One stream's share, while its records are loaded."""
        self._tasks[job_index][stream_index] = _task_meta(prep)
        self._clamped += prep.negative_durations

    def finish(self) -> dict[str, Any]:
        jobs_meta: list[dict[str, Any]] = []
        clocks: list[dict[str, Any]] = []
        overall = DropCounts()
        for j, (job, label) in enumerate(zip(self._jobs, self._labels, strict=True)):
            task_meta = [t for t in self._tasks[j] if t is not None]
            for stream, task in zip(job.streams, self._task_labels[j], strict=True):
                clocks.append(_clock(stream, label, task))
            dropped = job.dropped
            overall.queue += dropped.queue
            overall.tracer += dropped.tracer
            overall.relay += dropped.relay
            ranges = [t["time_range_ns"] for t in task_meta if t["time_range_ns"]]
            jobs_meta.append(
                {
                    "name": job.name,
                    "run_id": job.run_id,
                    "label": label,
                    "hosts": sorted({s.host for s in job.streams}),
                    "finished": all(s.finished for s in job.streams),
                    "tasks": task_meta,
                    "records": {k: sum(t["records"][k] for t in task_meta) for k in _KIND_COUNTS},
                    "time_range_ns": (
                        [min(r[0] for r in ranges), max(r[1] for r in ranges)] if ranges else None
                    ),
                    "dropped": _drop_dict(dropped),
                    # Captured time, whole run: the union of its capture windows.
                    "captured_ns": union_ns(
                        [(w[2], w[3]) for t in task_meta for w in t["capture_windows"]]
                    ),
                    "skipped": list(job.skipped)
                    + [f"{t['task']}: {what}" for t in task_meta for what in t["skipped"]],
                }
            )
        window = self._window
        return {
            "tool": tool_tag(),
            "group_by": self._group_by,
            "origin_ns": self._origin,
            "window_ns": None if window is None else [window.lo, window.hi],
            "jobs": jobs_meta,
            "devices": device_metadata(self._jobs, self._labels, self._task_labels),
            "dropped": _drop_dict(overall),
            "clocks": clocks,
            "clamped_negative_durations": self._clamped,
        }
