"""The timeline's metadata: tool, jobs, tasks, devices, clocks and losses, as plain JSON data.

Every export carries it (Chrome's ``otherData``); it says where each track came from and
what the trace does not show (records outside the window, dropped records).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tfprof.collector.jobdata import DropCounts, JobData, StreamData
from tfprof.collector.store.traced_windows import ALWAYS, union_ns
from tfprof.collector.timeline.model import GroupBy
from tfprof.collector.timeline.prepare import TimeWindow, job_labels, task_labels
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


def _count_kinds(counts: Sequence[int]) -> dict[str, int]:
    """``counts[k]``: records of kind k (anything past MEMORY: a kind this version does
    not know, counted as other)."""
    kernel, memcpy, memset = (
        int(counts[k]) for k in (RecordKind.KERNEL, RecordKind.MEMCPY, RecordKind.MEMSET)
    )
    total = int(sum(counts))
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


@dataclass(frozen=True)
class StreamFigures:
    """What the read found of one stored stream (a catalog process)."""

    kinds: Sequence[int]  # records in the window, by kind (``_count_kinds``)
    stored: int  # every record it holds, in the window or not
    negative: int  # stored durations below zero (clamped), over the whole stream
    time_range: tuple[int, int] | None  # first start, last end of those in the window
    whole_range: tuple[int, int] | None  # first start, last end of every record it holds


def _task_meta(
    streams: Sequence[StreamData], task_label: str, figures: StreamFigures
) -> dict[str, Any]:
    """One task (a catalog process: the streams of one job with one task label, read as
    one, as the timeline draws them: a reconnect, successive step files) and what the
    read found of it."""
    first = streams[0]
    records = _count_kinds(figures.kinds)
    dropped = DropCounts()
    for s in streams:
        dropped.queue += s.dropped.queue
        dropped.tracer += s.dropped.tracer
        dropped.relay += s.dropped.relay
    lost = [s.lost_records for s in streams]
    return {
        "task": task_label,
        "host": first.host,
        "pid": first.pid,
        "argv": list(first.argv),
        "source": first.source,
        "finished": all(s.finished for s in streams),
        "exit_code": first.exit_code,
        "records": records,
        "records_outside_window": figures.stored - records["total"],
        "time_range_ns": list(figures.time_range) if figures.time_range else None,
        "dropped": _drop_dict(dropped),
        # Stored parts that could not be read, and the records they held (None: unknown).
        "skipped": [what for s in streams for what in s.skipped],
        "records_lost": None if None in lost else sum(n for n in lost if n is not None),
        # The windows it was traced in (mode, capture ids, start, end; collector clock).
        "capture_windows": [list(w) for w in _windows(streams, figures)],
    }


def _windows(
    streams: Sequence[StreamData], figures: StreamFigures
) -> list[tuple[str, str, int, int]]:
    """The task's capture windows; one made of streams that say none (jobs built in
    memory): traced throughout, its records' span."""
    windows = sorted((w for s in streams for w in s.capture_windows), key=lambda w: w[2])
    if windows or figures.whole_range is None:
        return windows
    return [(ALWAYS, "", *figures.whole_range)]


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


def timeline_metadata(
    jobs: Sequence[JobData],
    group_by: GroupBy,
    origin: int,
    window: TimeWindow | None,
    figures: Sequence[StreamFigures],
) -> dict[str, Any]:
    """The timeline's metadata but its host side: ``figures`` per task of ``jobs`` (a
    catalog process), in order."""
    labels = job_labels(jobs)
    tasks_of = [task_labels(job) for job in jobs]
    jobs_meta: list[dict[str, Any]] = []
    clocks: list[dict[str, Any]] = []
    overall = DropCounts()
    found = iter(figures)
    for job, label, tasks in zip(jobs, labels, tasks_of, strict=True):
        by_task: dict[str, list[StreamData]] = {}  # the catalog's processes, in its order
        for stream, task in zip(job.streams, tasks, strict=True):
            by_task.setdefault(task, []).append(stream)
        task_meta = [_task_meta(group, t, next(found)) for t, group in by_task.items()]
        clocks += [_clock(s, label, t) for s, t in zip(job.streams, tasks, strict=True)]
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
    return {
        "tool": tool_tag(),
        "group_by": group_by,
        "origin_ns": origin,
        "window_ns": None if window is None else [window.lo, window.hi],
        "jobs": jobs_meta,
        "devices": device_metadata(jobs, labels, tasks_of),
        "dropped": _drop_dict(overall),
        "clocks": clocks,
        "clamped_negative_durations": sum(f.negative for f in figures),
    }
