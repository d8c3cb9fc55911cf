"""The timeline's metadata: tool, jobs, tasks, devices, clocks and losses, as plain JSON data.

Every export carries it (Chrome's ``otherData``); it says where each track came from and
what the trace does not show (records outside the window, dropped records).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tfprof.collector.model import DropCounts, StreamData
from tfprof.collector.prepare import PreparedJob, PreparedStream, TimeWindow
from tfprof.collector.timeline import GroupBy
from tfprof.core.records import RecordKind
from tfprof.core.version import __version__

# "other": everything but kernels, copies and memsets (syncs and the host side), as
# before there was a host side; "api", "marker", "memory" count the host side alone.
_KIND_COUNTS = ("kernel", "memcpy", "memset", "api", "marker", "memory", "other", "total")


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
    }


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


def _clock(prep: PreparedStream) -> dict[str, Any]:
    stream = prep.stream
    return {
        "job": prep.job_label,
        "task": prep.task_label,
        "host": stream.host,
        "pid": stream.pid,
        "record_shift_ns": stream.record_shift_ns,
        "host_shift_ns": stream.host_shift_ns,
        "clock_rtt_ns": stream.clock_rtt_ns,
    }


def timeline_metadata(
    jobs: Sequence[PreparedJob], group_by: GroupBy, origin: int, window: TimeWindow | None
) -> dict[str, Any]:
    jobs_meta: list[dict[str, Any]] = []
    devices: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    clocks: list[dict[str, Any]] = []
    overall = DropCounts()
    clamped = 0
    for prepared in jobs:
        job = prepared.job
        task_meta = [_task_meta(prep) for prep in prepared.streams]
        for prep in prepared.streams:
            clamped += prep.negative_durations
            by_task = devices.setdefault(prepared.label, {}).setdefault(prep.task_label, {})
            by_task.update(_devices(prep.stream))
            clocks.append(_clock(prep))
        dropped = job.dropped
        overall.queue += dropped.queue
        overall.tracer += dropped.tracer
        overall.relay += dropped.relay
        jobs_meta.append(
            {
                "name": job.name,
                "run_id": job.run_id,
                "label": prepared.label,
                "hosts": sorted({s.host for s in job.streams}),
                "finished": all(s.finished for s in job.streams),
                "tasks": task_meta,
                "records": {k: sum(t["records"][k] for t in task_meta) for k in _KIND_COUNTS},
                "time_range_ns": _time_range(prepared.streams),
                "dropped": _drop_dict(dropped),
                "skipped": list(job.skipped)
                + [f"{t['task']}: {what}" for t in task_meta for what in t["skipped"]],
            }
        )
    return {
        "tool": {"name": "tfprof-agent", "version": __version__},
        "group_by": group_by,
        "origin_ns": origin,
        "window_ns": None if window is None else [window.lo, window.hi],
        "jobs": jobs_meta,
        "devices": devices,
        "dropped": _drop_dict(overall),
        "clocks": clocks,
        "clamped_negative_durations": clamped,
    }
