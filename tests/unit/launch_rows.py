"""A test sweep over the read engine's ``HostLaunches``: one value per GPU record it
settles, keyed by a record column, and a need that reads that sweep alone."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tfprof.collector.read.engine import Read
from tfprof.collector.read.host_launches import (
    LAUNCH_COLUMNS,
    LAUNCH_QUERIES,
    LAUNCH_TABLES,
    ChunkLaunches,
    HostLaunches,
)
from tfprof.collector.read.launch_links import MAX_CALLS
from tfprof.collector.read.needs import Got, Query, Sweep
from tfprof.collector.read.time_chunks import Chunk

# (the read's names, the settled chunk, its launches, the index into them, the row in
# the chunk) -> the record's value; None leaves the record out.
RowValue = Callable[[Sequence[str], Chunk, ChunkLaunches, int, int], Any]


@dataclass(frozen=True)
class LaunchRows:
    """Sweep: ``{record[key]: value(...)}`` over the GPU records ``HostLaunches`` settles."""

    key: str
    value: RowValue
    capacity: int = MAX_CALLS
    tables: frozenset[str] = LAUNCH_TABLES
    queries: tuple[Query, ...] = LAUNCH_QUERIES

    @property
    def columns(self) -> frozenset[str]:
        return LAUNCH_COLUMNS | {self.key}

    def start(self, read: Read) -> _LaunchRowsState:
        return _LaunchRowsState(read, self)


class _LaunchRowsState:
    def __init__(self, read: Read, sweep: LaunchRows) -> None:
        self.read, self.sweep = read, sweep
        self.host = HostLaunches(read, sweep.capacity)
        self.out: dict[int, Any] = {}

    def feed(self, chunk: Chunk) -> None:
        fed = self.host.feed(chunk)
        if fed is None:
            return
        settled, h = fed
        names = self.read.names.names
        keys = settled[self.sweep.key]
        for i, row in enumerate(h.rows.tolist()):
            found = self.sweep.value(names, settled, h, i, row)
            if found is not None:
                self.out[int(keys[row])] = found

    def finish(self) -> dict[int, Any]:
        return self.out


@dataclass(frozen=True)
class SweptNeed:
    """A need that reads one sweep and answers what it found."""

    sweep: Sweep[Any]

    def queries(self) -> tuple[Query, ...]:
        return ()

    def sweeps(self) -> tuple[Sweep[Any], ...]:
        return (self.sweep,)

    def build(self, got: Got) -> Any:
        return got.swept(self.sweep)
