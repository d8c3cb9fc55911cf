"""Python stacks in the Chrome JSON export, as the Trace Event Format has them: a
top-level ``stackFrames`` dictionary (each frame its ``name`` and its caller's id,
``parent``) and sample events (``"ph": "P"``) naming the innermost frame of a stack
(``sf``), on their thread (docs/guides/code-view.md, "In the timeline").

Each traced process's samples are under a process of their own (its ``process_name``
is ``/job:J/task:T Python stacks (pid P)``, numbered from ``FIRST_PID``) and their OS
thread ids. chrome://tracing (catapult) draws them on the thread; the Perfetto UI reads
neither ``stackFrames`` nor ``sf`` (its callstack samples are in the .pftrace export).
A sample is a sampler tick or a launch capture.
"""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import orjson

from tfprof.collector.analysis import code_sql
from tfprof.collector.analysis.code_sql import KEY, Scope
from tfprof.collector.analysis.code_tree import frame_name
from tfprof.collector.export.output import BinaryOutput
from tfprof.collector.export.perfetto_stacks import FIRST_PID, SAMPLES_PER_PACKET


class ChromeStacks:
    """Writes the sample events (inside ``traceEvents``) and then ``stackFrames``."""

    def __init__(self, con: duckdb.DuckDBPyConnection, scope: Scope, origin_ns: int) -> None:
        self.con = con
        self.scope = scope
        self.origin_ns = origin_ns
        self.streams: dict[tuple[str, str, str], int] = {}  # -> its number (frame ids)

    def events(self) -> Iterator[bytes]:
        """Chunks of events, each event led by a comma, as the reporter's own."""
        pids = {
            (job, run, stream): (int(pid or 0), task)
            for job, run, stream, pid, task in self.con.execute(
                "SELECT job, run, stream_id, any_value(pid), any_value(task) FROM streams "
                "GROUP BY ALL"
            ).fetchall()
        }
        rows = self.con.execute(
            f"SELECT job, run, CAST(stream_id AS VARCHAR), thread, time_ns, stack_id "
            f"FROM stack_samples WHERE {self.scope.where('time_ns', None)} "
            f"AND time_ns >= {int(self.origin_ns)} ORDER BY job, run, stream_id, thread, time_ns"
        )
        while batch := rows.fetchmany(SAMPLES_PER_PACKET):
            parts = []
            for job, run, stream, thread, time_ns, stack_id in batch:
                key = (job, run, stream)
                number = self.streams.get(key)
                if number is None:
                    number = self.streams[key] = len(self.streams)
                    pid, task = pids.get(key, (0, ""))
                    name = f"/job:{job}/task:{task} Python stacks (pid {pid})"
                    parts.append(b"," + orjson.dumps({
                        "ph": "M", "name": "process_name", "pid": FIRST_PID + number,
                        "args": {"name": name}}))  # fmt: skip
                ts = (int(time_ns) - self.origin_ns) / 1000
                parts.append(
                    b',{"ph":"P","name":"python stack","pid":%d,"tid":%d,"ts":%.3f,"sf":"%d.%d"}'
                    % (FIRST_PID + number, int(thread), ts, number, int(stack_id))
                )
            yield b"".join(parts)

    def members(self, out: BinaryOutput) -> None:
        """``,"stackFrames":{...}``: every frame of the stacks the samples named (nothing
        when no sample was written: a trace without stacks keeps its shape)."""
        if not self.streams:
            return
        leaves = (
            f"SELECT DISTINCT {KEY}, stack_id FROM stack_samples "
            f"WHERE {self.scope.where('time_ns', None)} AND time_ns >= {int(self.origin_ns)}"
        )
        nodes = code_sql.ancestors(self.con, leaves).rows
        frames = {}
        for (job, run, stream, stack_id), (parent, file, line, function) in nodes.items():
            number = self.streams.get((job, run, stream))
            if number is None:
                continue
            frame = {"name": frame_name(file, line, function), "category": "python"}
            if parent:
                frame["parent"] = f"{number}.{parent}"
            frames[f"{number}.{stack_id}"] = frame
        out.write(b',"stackFrames":' + orjson.dumps(frames))
