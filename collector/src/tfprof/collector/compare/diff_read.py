"""A diff's reads: SQL over the read engine's relations of one side, nothing else."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tfprof.collector.read import engine
from tfprof.collector.read.engine import Read
from tfprof.collector.read.lake_catalog import Catalog
from tfprof.collector.read.needs import Got, Query, Sweep


@dataclass(frozen=True)
class RowsNeed:
    """A need of SQL only: each query's rows."""

    wanted: tuple[Query, ...]

    def queries(self) -> Sequence[Query]:
        return self.wanted

    def sweeps(self) -> Sequence[Sweep[Any]]:
        return ()

    def build(self, got: Got) -> list[list[tuple[Any, ...]]]:
        return [got.rows(q) for q in self.wanted]


def read_rows(cat: Catalog, *queries: Query) -> tuple[Read, list[list[tuple[Any, ...]]]]:
    """The read (what it covered, the files it left out) and each query's rows, from one
    read of ``cat``."""
    read, (rows,) = engine.read(cat, [RowsNeed(queries)])
    return read, rows
