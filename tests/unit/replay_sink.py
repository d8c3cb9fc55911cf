"""A recording fake sink for the replay source's tests, and the traces they replay."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tests.traces import TRACES
from tfprof.agent.inprocess import frames
from tfprof.agent.inprocess.sources.replay import ReplaySource
from tfprof.core.records import COLUMNS, DeviceInfo, RecordKind, RecordTable
from tfprof.readers import RecordedTrace


def trace_file(rel: str) -> str:
    assert TRACES is not None
    return str(TRACES / rel)


class FakeSink:
    """Records what a source hands over; ``block`` holds submit() until released."""

    def __init__(self, accept: bool = True, fail: bool = False, block: bool = False) -> None:
        self.strings = frames.StringTable()
        self.tables: list[RecordTable] = []
        self.submit_times: list[int] = []
        self.devices: list[list[DeviceInfo]] = []
        self.warnings: list[str] = []
        self.accept, self.fail = accept, fail
        self.release = threading.Event()
        if not block:
            self.release.set()
        self.entered = threading.Event()

    def intern(self, name: str) -> int:
        return self.strings.intern(name)

    def submit(self, table: RecordTable, wait: bool = False) -> bool:
        assert wait, "replay runs on its own thread and must wait, not drop"
        self.entered.set()
        self.release.wait()
        if self.fail:
            raise RuntimeError("sink exploded")
        self.submit_times.append(time.monotonic_ns())
        self.tables.append(table)
        return self.accept

    def stack_sink(self) -> None:
        return None  # --code off: no recorded stacks wanted

    def add_devices(self, devices: list[DeviceInfo]) -> None:
        self.devices.append(devices)

    def add_tracer_dropped(self, count: int) -> None:
        raise AssertionError("replay loses nothing in a tracer")

    def warn(self, message: str) -> None:
        self.warnings.append(message)

    def rows(self) -> list[dict[str, int]]:
        out = []
        for table in self.tables:
            cols = [list(table.column(name)) for name in COLUMNS]
            out += [dict(zip(COLUMNS, values, strict=True)) for values in zip(*cols, strict=True)]
        return out

    def name(self, index: int) -> str:
        return self.strings._strings[index]


def replay_all(path: str, speed: float | None = None, repeat: int = 1) -> tuple[FakeSink, int, int]:
    sink = FakeSink()
    before = time.time_ns()
    source = ReplaySource(path, speed=speed, repeat=repeat)
    source.start(sink)
    source.stop(time.monotonic() + 60)
    return sink, before, time.time_ns()


def row_key(row: dict[str, int], sink: FakeSink, origin: int) -> tuple[Any, ...]:
    category = sink.name(row["category"]) if row["kind"] == RecordKind.MARKER else row["category"]
    return (row["start_ns"] - origin, row["duration_ns"], sink.name(row["name"]), row["kind"],
            row["device"], row["stream"], row["copy_kind"], row["bytes"], row["thread"],
            row["cbid"], category)  # fmt: skip


def trace_keys(trace: RecordedTrace, shift: int = 0) -> Counter[tuple[Any, ...]]:
    c = trace.columns
    return Counter(
        (c["start_ns"][i] + shift, c["duration_ns"][i], trace.names[c["name"][i]], c["kind"][i],
         c["device"][i], c["stream"][i], c["copy_kind"][i], c["bytes"][i], c["thread"][i],
         c["cbid"][i],
         trace.names[c["category"][i]] if c["kind"][i] == RecordKind.MARKER else c["category"][i])
        for i in range(len(trace))
    )  # fmt: skip


def kineto_kernels(tmp_path: Path, offsets_us: list[int]) -> str:
    events = [
        {"ph": "X", "cat": "kernel", "name": f"k{i}", "pid": 0, "tid": 7,
         "ts": 1_000_000 + off, "dur": 1, "args": {"device": 0, "stream": 7, "correlation": i + 1}}
        for i, off in enumerate(offsets_us)
    ]  # fmt: skip
    path = tmp_path / "small.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return str(path)
