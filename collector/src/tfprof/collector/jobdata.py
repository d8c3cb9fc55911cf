"""Typed, columnar views of stored jobs: what merge, export and summaries consume.

Everything here is plain data with numpy columns, no gRPC and no files: the store
builds these, the pure steps (merge, analyses) read them. CUPTI enum labels live in
``tfprof.core.cupti_labels``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tfprof.core.records import COLUMNS

RECORD_COLUMNS = COLUMNS
HOST_COLUMNS: tuple[str, ...] = (
    "time_ns",
    "cpu_percent",
    "rss_bytes",
    "threads",
    "read_bytes",
    "write_bytes",
)


@dataclass(frozen=True)
class DeviceMeta:
    ordinal: int
    uuid: str
    name: str = ""
    pci_bus_id: str = ""
    compute_capability: tuple[int, int] = (0, 0)
    sm_count: int = 0
    memory_bytes: int = 0


@dataclass
class DropCounts:
    queue: int = 0  # hook queue full
    tracer: int = 0  # CUPTI's own count
    relay: int = 0  # lost between hook and collector

    @property
    def total(self) -> int:
        return self.queue + self.tracer + self.relay


def empty_records() -> dict[str, np.ndarray]:
    return {name: np.zeros(0, dtype=np.int64) for name in RECORD_COLUMNS}


def empty_host() -> dict[str, np.ndarray]:
    return {
        name: np.zeros(0, dtype=np.float64 if name == "cpu_percent" else np.int64)
        for name in HOST_COLUMNS
    }


@dataclass
class StreamData:
    """One traced process of one job: its identity, records and host samples."""

    job: str
    run_id: str
    host: str
    pid: int
    task: str
    argv: list[str] = field(default_factory=list)
    source: str = ""
    # Add to record timestamps to reach the collector's clock: the host's offset to the
    # collector plus, for tracers with their own clock, that clock's offset to realtime.
    record_shift_ns: int = 0
    # Add to host-sample timestamps (taken by the launcher on the same host).
    host_shift_ns: int = 0
    clock_rtt_ns: int = 0
    # The (record, host) shifts already in the stored times: a lake stream's times are
    # on the collector clock (its shifts above are 0); the timeline's clocks metadata
    # says the whole alignment, these plus the shifts above.
    applied_shifts_ns: tuple[int, int] = (0, 0)
    devices: dict[int, DeviceMeta] = field(default_factory=dict)
    strings: list[str] = field(default_factory=lambda: [""])
    records: dict[str, np.ndarray] = field(default_factory=empty_records)
    host_samples: dict[str, np.ndarray] = field(default_factory=empty_host)
    dropped: DropCounts = field(default_factory=DropCounts)
    finished: bool = False
    exit_code: int | None = None
    # What of the stored stream could not be read (damaged log bytes, a torn goodbye),
    # and the records that held (None: unknown).
    skipped: list[str] = field(default_factory=list)
    lost_records: int | None = 0
    # The windows of time it was traced in (the lake's capture_windows rows): mode,
    # capture ids, start, end on the collector clock. None of them, or an ``always``
    # one: traced throughout.
    capture_windows: list[tuple[str, str, int, int]] = field(default_factory=list)

    @property
    def num_records(self) -> int:
        return int(self.records["kind"].shape[0])

    def device_uuid(self, ordinal: int) -> str:
        meta = self.devices.get(ordinal)
        return meta.uuid if meta and meta.uuid else f"{self.host}/gpu:{ordinal}"


@dataclass
class JobData:
    name: str
    run_id: str
    streams: list[StreamData] = field(default_factory=list)
    # Streams left out whole because they could not be read: "<stream>: <why>".
    skipped: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return self.name

    @property
    def num_records(self) -> int:
        return sum(s.num_records for s in self.streams)

    @property
    def dropped(self) -> DropCounts:
        total = DropCounts()
        for s in self.streams:
            total.queue += s.dropped.queue
            total.tracer += s.dropped.tracer
            total.relay += s.dropped.relay
        return total
