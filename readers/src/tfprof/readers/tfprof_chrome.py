"""tfprof's own Chrome export (and the events our binary formats are read into) into records.

Recognised by ``otherData.tool.name`` "tfprof-agent", a ``tfprof`` key in ``otherData`` /
``metadata``, or our track names. Tracks are ``/job:J/task:T/gpu:N/stream:M`` and
``/job:J/task:T/gpu:N/memcpy`` (``tfprof.core.tracks.TrackKey``), as processes (grouped
by job) or as threads of a physical-GPU process (grouped by GPU). Copies sit on both, so
only stream tracks are read; ``cat`` says kernel / memcpy / memset / sync (``args.kind``
as a fallback, in an older hand-written form), and the args are read back through the
slice-arg table the exporters write from (``tfprof.core.slice_args``), enums as labels or
numbers. With several (job, task) pairs, each (job, task, gpu) becomes its own device
ordinal (``RecordedTrace.gpu_of`` keeps the GPU's own). Copy and memset names come back
as the exporter's labels ("MEMCPYHtoD"), not the original ones; every other column
round-trips exactly.

Host slices (CUDA API calls, host ranges) come back from the thread tracks of a task's
``/job:J/task:T/cpu`` process (threads named ``thread:TID``, lanes ``thread:TID lane N``):
category ``cuda_api`` is an API call, any other category a range of that category.

The counters of that process come back too (``tfprof.core.counters`` names them): host
samples as the task's ``host_samples``; a device-memory counter, the running sum of the
allocations and releases the export drew it from, as one MEMORY record per value (an
allocation of the rise, a release of the fall, neither when it stays), so that summing
them again draws the same counter.

Every record and sample keeps the job and task its track names (``RecordedTrace.tasks``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

from tfprof.core.counters import HOST_SERIES, memory_device, series_of
from tfprof.core.records import RecordKind
from tfprof.core.slice_args import CATEGORY_KINDS, HOST_CATEGORIES, OTHER_CATEGORY, args_of
from tfprof.core.tracks import TrackKey, TrackKind
from tfprof.readers.event_fields import arg_columns, event_args
from tfprof.readers.trace import Event
from tfprof.readers.trace_builder import TraceBuilder

TOOL_NAME = "tfprof-agent"  # otherData.tool.name of our exports
_TRACK_START = "/job:"
_THREAD_NAME = re.compile(r"thread:(\d+)(?: lane \d+)?$")
_API_CATEGORY = HOST_CATEGORIES[RecordKind.API]
_MEMORY_ALLOCATION, _MEMORY_RELEASE = 1, 2  # CUpti_ActivityMemoryOperationType


def gpu_track(name: str) -> TrackKey | None:
    """The GPU track (stream or memcpy) a process or thread name of ours names, if any.

    Lanes after a track's first are threads named ``<track> lane k``; a track name in the
    middle of another tool's name is not ours, so ours must start the name.
    """
    key = TrackKey.search(name) if name.startswith(_TRACK_START) else None
    return key if key is not None and key.kind is not TrackKind.CPU else None


def is_tfprof(meta: dict[str, Any], events: list[Event]) -> bool:
    for key in ("otherData", "metadata"):
        extra = meta.get(key)
        if isinstance(extra, dict):
            tool = extra.get("tool")
            if "tfprof" in extra or (isinstance(tool, dict) and tool.get("name") == TOOL_NAME):
                return True
    # our track names, even without our metadata
    return any(e.get("ph") == "M" and gpu_track(str(event_args(e).get("name", ""))) for e in events)


def origin_ns(meta: dict[str, Any]) -> int:
    """Our export's times are relative to ``otherData.origin_ns``; 0 when absent."""
    extra = meta.get("otherData")
    origin = extra.get("origin_ns") if isinstance(extra, dict) else None
    return origin if isinstance(origin, int) and not isinstance(origin, bool) else 0


def read_tfprof(events: list[Event], out: TraceBuilder) -> None:
    tracks = _stream_tracks(events)
    hosts = _cpu_processes(events)
    memory = _memory_counters(events, hosts)
    gpus = sorted({(key.job, key.task, key.gpu) for key in tracks.values()} | set(memory))
    if len({gpu[:2] for gpu in gpus}) > 1:
        # One process replays it: give each (job, task, gpu) an ordinal of its own.
        ordinals = {gpu: i for i, gpu in enumerate(gpus)}
    else:
        ordinals = {gpu: gpu[2] for gpu in gpus}
    out.gpu_of.update((ordinal, gpu[2]) for gpu, ordinal in ordinals.items())
    threads = _host_threads(events, hosts)
    for e in events:
        if e.get("ph") != "X":
            continue
        thread = threads.get((e.get("pid"), e.get("tid")))
        if thread is not None:
            tid, job, task = thread
            _add_host_slice(e, tid, out, out.task(job, task))
            continue
        key = tracks.get((e.get("pid"), e.get("tid")))
        if key is None:
            continue
        args = event_args(e)
        kind = CATEGORY_KINDS.get(str(e.get("cat")))
        if kind is None:  # an older hand-written form put the kind in args ...
            kind = CATEGORY_KINDS.get(str(args.get("kind")))
            args = {k: v for k, v in args.items() if k != "kind"}  # ... not a copy kind
        if kind is None:
            continue  # activity kinds this version does not replay
        values = arg_columns(args, args_of(kind))
        values.update(
            device=ordinals[(key.job, key.task, key.gpu)],
            stream=key.stream,
            name=out.name(str(e.get("name", ""))),
        )
        out.add(RecordKind(kind), e, out.task(key.job, key.task), **values)
    for (job, task, gpu), levels in memory.items():
        _add_memory(levels, out, out.task(job, task), ordinals[(job, task, gpu)])
    _read_host_samples(events, hosts, out)


def _add_host_slice(e: Event, thread: int, out: TraceBuilder, task: int) -> None:
    category = str(e.get("cat") or "")
    kind = RecordKind.API if category == _API_CATEGORY else RecordKind.MARKER
    values = arg_columns(event_args(e), args_of(kind))
    values.update(thread=thread, name=out.name(str(e.get("name", ""))))
    if kind is RecordKind.MARKER and category and category != OTHER_CATEGORY:
        values["category"] = out.name(category)
    out.add(kind, e, task, **values)


def _cpu_processes(events: list[Event]) -> dict[Any, TrackKey]:
    """pid -> the host track (``/job:J/task:T/cpu``) of each task's host process."""
    hosts: dict[Any, TrackKey] = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            key = _any_track(str(event_args(e).get("name", "")))
            if key is not None and key.kind is TrackKind.CPU:
                hosts[e.get("pid")] = key
    return hosts


def _counter_values(
    events: list[Event], hosts: dict[Any, TrackKey]
) -> Iterator[tuple[TrackKey, str, Event, Any]]:
    """(host, series, event, value) of each value of our counters on a task's host."""
    for e in events:
        if e.get("ph") != "C" or e.get("pid") not in hosts:
            continue
        name = str(e.get("name", ""))
        for key, value in event_args(e).items():
            series = series_of(name, key)
            number = isinstance(value, (int, float, Decimal)) and not isinstance(value, bool)
            if series is not None and number:
                yield hosts[e["pid"]], series, e, value


def _memory_counters(
    events: list[Event], hosts: dict[Any, TrackKey]
) -> dict[tuple[str, str, int], list[tuple[Event, int]]]:
    """Each (job, task, gpu)'s device-memory counter: (event, bytes) in file order."""
    found: dict[tuple[str, str, int], list[tuple[Event, int]]] = {}
    for host, series, e, value in _counter_values(events, hosts):
        gpu = memory_device(series)
        if gpu is not None:
            found.setdefault((host.job, host.task, gpu), []).append((e, int(value)))
    return found


def _add_memory(levels: list[tuple[Event, int]], out: TraceBuilder, task: int, device: int) -> None:
    """The MEMORY records a device-memory counter was summed from: each change of level
    an allocation (a rise) or a release (a fall) of the difference, at its time."""
    timed = sorted(((out.ns(e, "ts", required=True), e, v) for e, v in levels),
                   key=lambda t: t[0])  # fmt: skip
    level = 0
    for _, e, value in timed:
        delta, level = value - level, value
        op = _MEMORY_ALLOCATION if delta > 0 else _MEMORY_RELEASE if delta < 0 else 0
        instant = {"ts": e["ts"]}  # a counter value has no duration
        out.add(RecordKind.MEMORY, instant, task, device=device, bytes=abs(delta), memory_op=op)


def _read_host_samples(events: list[Event], hosts: dict[Any, TrackKey], out: TraceBuilder) -> None:
    for host, series, e, value in _counter_values(events, hosts):
        if series in HOST_SERIES:
            ns = out.ns(e, "ts", required=True)
            reading = float(value) if series == "cpu_percent" else int(value)
            out.host_sample(out.task(host.job, host.task), series, ns, reading)


def _host_threads(
    events: list[Event], hosts: dict[Any, TrackKey]
) -> dict[tuple[Any, Any], tuple[int, str, str]]:
    """(pid, tid) -> (OS thread id, job, task), for the thread tracks of a task's
    ``cpu`` process."""
    threads: dict[tuple[Any, Any], tuple[int, str, str]] = {}
    for e in events:
        host = hosts.get(e.get("pid")) if e.get("ph") == "M" else None
        if host is not None and e.get("name") == "thread_name":
            match = _THREAD_NAME.match(str(event_args(e).get("name", "")))
            if match:
                threads[(e.get("pid"), e.get("tid"))] = (int(match.group(1)), host.job, host.task)
    return threads


def _any_track(name: str) -> TrackKey | None:
    """Any track key of ours (GPU or host) a process name starts with."""
    return TrackKey.search(name) if name.startswith(_TRACK_START) else None


def _stream_tracks(events: list[Event]) -> dict[tuple[Any, Any], TrackKey]:
    """(pid, tid) -> stream track, for slices on a stream track.

    Grouped by job, a track is a process (its lanes are threads); grouped by GPU, the
    process is the physical GPU and each lane is a thread named after its track. Both
    are read; memcpy tracks only repeat the copies of stream tracks.
    """
    by_pid: dict[Any, TrackKey] = {}
    by_thread: dict[tuple[Any, Any], TrackKey] = {}
    for e in events:
        if e.get("ph") != "M" or e.get("name") not in ("process_name", "thread_name"):
            continue
        key = gpu_track(str(event_args(e).get("name", "")))
        if key is None or key.kind is not TrackKind.STREAM:
            continue
        if e["name"] == "process_name":
            by_pid[e.get("pid")] = key
        else:
            by_thread[(e.get("pid"), e.get("tid"))] = key
    tracks = dict(by_thread)
    for e in events:
        if e.get("ph") == "X" and e.get("pid") in by_pid:
            tracks.setdefault((e.get("pid"), e.get("tid")), by_pid[e.get("pid")])
    return tracks
