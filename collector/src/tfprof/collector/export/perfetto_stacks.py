"""Python stacks in the Perfetto export: each traced process's stack samples as Perfetto's
callstack samples on its threads (docs/guides/code-view.md, "In the timeline").

A Perfetto trace is a list of packets, and two serialised lists concatenated are one
(export/perfetto.py), so the stacks are packets appended to the timeline's file. Per
traced thread, one packet sequence: its first packet names the thread
(``thread_descriptor``: the process's pid, the OS thread id, a title) and interns the
frames and call stacks its samples use; then ``streaming_profile_packet``s carry the
samples, a call stack id and a time delta (µs) each. The Perfetto UI draws a "CPU Stack
Samples" track under a process titled after the traced process, and a selection of it
gives a flame graph of its samples. A sample is a sampler tick (``--code sample``) or a
launch capture (``--code launch``, and every launch of a trace recorded with_stack).

Times are on the timeline's clock: relative to its origin (the clock snapshot the
timeline's first packet holds maps that to the collector clock).
"""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pftrace

from tfprof.collector.analysis import code_sql
from tfprof.collector.analysis.code_read import Paths
from tfprof.collector.analysis.code_sql import KEY, Scope

_CLEARED = pftrace.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
_NEEDS_STATE = pftrace.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
FIRST_SEQUENCE = 1 << 16  # above the timeline's own packet sequences
# Processes are numbered from here, not by their pids: imported files are all pid 1, and
# processes of two hosts can share one (the title says the real pid).
FIRST_PID = 1 << 22
SAMPLES_PER_PACKET = 4096


def _samples(scope: Scope) -> str:
    return (
        f"SELECT s.job, s.run, CAST(s.stream_id AS VARCHAR) AS stream, "
        f"CAST(s.task AS VARCHAR) AS task, s.thread, s.time_ns, s.stack_id "
        f"FROM stack_samples s WHERE {scope.where('time_ns', None)}"
    )


def stack_packets(
    con: duckdb.DuckDBPyConnection, scope: Scope, origin_ns: int
) -> Iterator[pftrace.Trace]:
    """The packets of every traced thread's stack samples, a thread's sequence at a time."""
    leaves = (
        f"SELECT DISTINCT {KEY}, stack_id FROM stack_samples WHERE {scope.where('time_ns', None)}"
    )
    paths = Paths(code_sql.ancestors(con, leaves), {})
    pids = {
        (job, run, stream): int(pid or 0)
        for job, run, stream, pid in con.execute(
            "SELECT job, run, stream_id, any_value(pid) FROM streams GROUP BY ALL"
        ).fetchall()
    }
    numbers: dict[tuple[str, str, str], int] = {}
    rows = con.execute(
        f"SELECT * FROM ({_samples(scope)}) WHERE time_ns >= {int(origin_ns)} "
        "ORDER BY job, run, stream, thread, time_ns"
    )
    sequence = FIRST_SEQUENCE
    current: _Thread | None = None
    while batch := rows.fetchmany(SAMPLES_PER_PACKET):
        for job, run, stream, task, thread, time_ns, stack_id in batch:
            key = (job, run, stream, int(thread))
            if current is None or current.key != key:
                if current is not None:
                    yield from current.flush()
                pid = numbers.get(key[:3])
                if pid is None:
                    pid = numbers[key[:3]] = FIRST_PID + len(numbers)
                    yield _process(pid, f"/job:{job}/task:{task} Python stacks (pid "
                                   f"{pids.get(key[:3], 0)})", sequence)  # fmt: skip
                    sequence += 1
                current = _Thread(key, sequence, pid, paths)
                sequence += 1
            current.add(int(time_ns) - origin_ns, int(stack_id))
            if len(current.stacks) >= SAMPLES_PER_PACKET:
                yield from current.flush()
    if current is not None:
        yield from current.flush()


def _process(pid: int, name: str, sequence: int) -> pftrace.Trace:
    trace = pftrace.Trace()
    packet = trace.packet.add()
    packet.trusted_packet_sequence_id = sequence
    packet.process_descriptor.pid = pid
    packet.process_descriptor.process_name = name
    return trace


class _Thread:
    """One thread's packet sequence: interned frames and call stacks, then its samples."""

    def __init__(
        self, key: tuple[str, str, str, int], sequence: int, pid: int, paths: Paths
    ) -> None:
        self.key = key
        self.sequence = sequence
        self.pid = pid
        self.paths = paths
        self.frames: dict[str, int] = {}  # frame name -> iid
        self.callstacks: dict[int, int] = {}  # stack id -> iid
        self.new_frames: list[str] = []
        self.new_stacks: list[tuple[int, list[int]]] = []
        self.stacks: list[int] = []  # per sample: callstack iid
        self.deltas: list[int] = []
        self.last_us: int | None = None
        self.started = False

    def add(self, rel_ns: int, stack_id: int) -> None:
        iid = self.callstacks.get(stack_id)
        if iid is None:
            path = self.paths.path(self.key[:3], stack_id) or ("(unknown stack)",)
            ids = []
            for name in path:
                frame = self.frames.get(name)
                if frame is None:
                    frame = self.frames[name] = len(self.frames) + 1
                    self.new_frames.append(name)
                ids.append(frame)
            iid = self.callstacks[stack_id] = len(self.callstacks) + 1
            self.new_stacks.append((iid, ids))
        now = rel_ns // 1000
        if self.last_us is None:
            self.first_us = now
            self.last_us = now
        self.stacks.append(iid)
        self.deltas.append(now - self.last_us)
        self.last_us = now

    def flush(self) -> Iterator[pftrace.Trace]:
        if not self.stacks:
            return
        trace = pftrace.Trace()
        packet = trace.packet.add()
        packet.trusted_packet_sequence_id = self.sequence
        if not self.started:
            packet.first_packet_on_sequence = True
            packet.sequence_flags = _CLEARED
            desc = packet.thread_descriptor
            desc.pid, desc.tid = self.pid, self.key[3]
            desc.thread_name = f"thread {self.key[3]}"
            desc.reference_timestamp_us = self.first_us
            self.deltas[0] = 0
            self.started = True
            interned = packet.interned_data
            interned.mappings.add(iid=1, path_string_ids=[1])
            interned.mapping_paths.add(iid=1, str=b"python")
            packet = trace.packet.add()
            packet.trusted_packet_sequence_id = self.sequence
        packet.sequence_flags = _NEEDS_STATE
        interned = packet.interned_data
        for name in self.new_frames:
            iid = self.frames[name]
            interned.function_names.add(iid=iid, str=name.encode())
            # rel_pc: the frame's own id, so no two frames intern as one
            interned.frames.add(iid=iid, function_name_id=iid, mapping_id=1, rel_pc=iid)
        for iid, ids in self.new_stacks:
            interned.callstacks.add(iid=iid, frame_ids=ids)
        self.new_frames, self.new_stacks = [], []
        packet.streaming_profile_packet.callstack_iid.extend(self.stacks)
        packet.streaming_profile_packet.timestamp_delta_us.extend(self.deltas)
        self.stacks, self.deltas = [], []
        yield trace
