"""A stored stream's records loaded from the lake (``LakeStream``, a ``StreamData`` whose
records are read only inside ``loaded``): the record tables' rows converted to the
numpy ``RECORD_COLUMNS`` (``read_records``), names as ids into a stream-local string
table, columns held narrower where their lake type allows (``LOADED_DTYPES``), and the
stream's host samples (``read_host_samples``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from tfprof.collector.jobdata import (
    HOST_COLUMNS,
    RECORD_COLUMNS,
    StreamData,
    empty_host,
    empty_records,
)
from tfprof.collector.lake.arrays import numbers
from tfprof.collector.lake.schema import HOST_SAMPLES, RECORD_TABLES, TABLES
from tfprof.collector.lake.stream_parts import StreamParts, read_rows
from tfprof.core.records import RecordKind

GPU_TABLES = tuple(RECORD_TABLES[k].name for k in (
    RecordKind.KERNEL, RecordKind.MEMCPY, RecordKind.MEMSET, RecordKind.SYNC))  # fmt: skip
HOST_TABLES = tuple(
    RECORD_TABLES[k].name for k in (RecordKind.API, RecordKind.MARKER, RecordKind.MEMORY)
)
_KIND_OF = {t.name: int(k) for k, t in RECORD_TABLES.items()}
_RECORD_COLUMNS_OF = {t.name: {c.record_column for c in t.columns} for t in RECORD_TABLES.values()}
# The record columns the analyses and the timeline read; the others (launch geometry,
# registers, addresses, callback ids) stay on disk and read as zeros.
READ_COLUMNS = (
    "start_ns", "duration_ns", "device", "stream", "correlation", "name", "bytes",
    "copy_kind", "src_kind", "dst_kind", "sync_type", "thread", "return_value",
    "external_id", "memory_op", "category",
)  # fmt: skip


# Columns held narrower than int64 while a stream is loaded: signed, and wide enough for
# every value their lake type holds (names: stream-local string ids). The rest, ids
# and times that analyses shift and combine, stay int64.
LOADED_DTYPES: dict[str, type] = {
    "name": np.int32, "category": np.int32, "return_value": np.int32,
    "copy_kind": np.int16, "src_kind": np.int16, "dst_kind": np.int16,
    "sync_type": np.int16, "memory_op": np.int16,
    # Read only by the exports (launch geometry, ids), whose column accessors widen what
    # they pick to int64: held in their lake type exactly (~300 MB less per 2.5M records).
    "grid_x": np.uint32, "grid_y": np.uint16, "grid_z": np.uint16,
    "block_x": np.uint16, "block_y": np.uint16, "block_z": np.uint16,
    "registers": np.uint16, "static_smem": np.uint32, "dynamic_smem": np.uint32,
    "context": np.uint32, "dst_device": np.uint16, "cbid": np.uint16,
}  # fmt: skip


@dataclass
class LakeStream(StreamData):
    """A ``StreamData`` whose records are read from the lake inside ``loaded``."""

    parts: StreamParts = field(default_factory=StreamParts, repr=False)

    @contextlib.contextmanager
    def loaded(self, host: bool = True, columns: Sequence[str] = READ_COLUMNS) -> Iterator[None]:
        """The stream's records (GPU activity; with ``host`` also API calls, ranges and
        memory records) and host samples, for the duration of the block; of
        the record columns only ``columns`` are read (the others are zeros)."""
        tables = GPU_TABLES + (HOST_TABLES if host else ())
        self.records, self.strings = read_records(self.parts, tables, columns)
        self.host_samples = read_host_samples(self.parts)
        self.note_damage()
        pa.default_memory_pool().release_unused()  # the Arrow buffers are numpy's now
        try:
            yield
        finally:
            self.records, self.strings = empty_records(), [""]
            self.host_samples = empty_host()

    def note_damage(self) -> None:
        """The files found unreadable so far, in what the stream says it skipped."""
        for path, found in self.parts.damaged.items():
            line = f"{path}: {found.reason}"
            if line not in self.skipped:
                self.skipped.append(line)
                held = found.rows
                self.lost_records = (
                    None if held is None or self.lost_records is None
                    else self.lost_records + held
                )  # fmt: skip

    def record_times(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(start_ns, duration_ns) of the stream's records, a table at a time, without
        loading it (the export's pass for its time origin)."""
        for table in (*GPU_TABLES, *HOST_TABLES):
            rows = read_rows(self.parts, table, ["start_ns", "duration_ns"])
            if rows is not None and rows.num_rows:
                yield numbers(rows.column("start_ns")), numbers(rows.column("duration_ns"))
            del rows

    def host_sample_times(self) -> np.ndarray:
        rows = read_rows(self.parts, HOST_SAMPLES.name, ["time_ns"])
        if rows is None:
            return np.zeros(0, np.int64)
        times = numbers(rows.column("time_ns"))
        return times


class _Strings:
    """A stream-local string table rebuilt from dictionary-encoded name columns."""

    def __init__(self) -> None:
        self.strings = [""]
        self._ids = {"": 0}

    def ids(self, column: pa.ChunkedArray) -> np.ndarray:
        out = []
        for chunk in column.chunks:
            if not isinstance(chunk, pa.DictionaryArray):
                # Imported where used: an import that reading segments (summary,
                # advise, export: dictionary columns) does not need.
                import pyarrow.compute as pc

                chunk = pc.dictionary_encode(chunk)
            table = np.array([self._id(v) for v in chunk.dictionary.to_pylist()], np.int32)
            indices = numbers(chunk.indices, null=0)
            out.append(table[indices] if len(table) else np.zeros(len(chunk), np.int32))
        return np.concatenate(out) if out else np.zeros(0, np.int32)

    def _id(self, name: str | None) -> int:
        if not name:
            return 0
        found = self._ids.get(name)
        if found is None:
            found = self._ids[name] = len(self.strings)
            self.strings.append(name)
        return found


def read_records(
    parts: StreamParts, tables: Sequence[str], read: Sequence[str] = READ_COLUMNS
) -> tuple[dict[str, np.ndarray], list[str]]:
    """The stream's records of ``tables`` as ``RECORD_COLUMNS`` (int64 unless narrower in
    ``LOADED_DTYPES``; the columns not in ``read`` are zeros that take no memory) and its
    string table. ``read`` may name any record column: the analyses read
    ``READ_COLUMNS``, the timeline exports every column (launch geometry included)."""
    strings = _Strings()
    read = [c for c in dict.fromkeys(read) if c != "kind"]
    found: dict[str, list[pa.Table]] = {}
    for name in tables:
        rows = read_rows(parts, name, _lake_names(name, read))
        if rows is not None and rows.num_rows:
            found[name] = [rows]
        del rows
    return _records(found, read, strings, tables), strings.strings


def _lake_names(table: str, read: Sequence[str]) -> list[str]:
    """The lake columns of ``table`` holding the record columns ``read``."""
    lake_names = {c.record_column: c.name for c in TABLES[table].columns}
    return [lake_names[c] for c in read if c in lake_names]


def _records(
    found: dict[str, list[pa.Table]],
    read: Sequence[str],
    strings: _Strings,
    tables: Sequence[str] | None = None,
) -> dict[str, np.ndarray]:
    """``RECORD_COLUMNS`` of the rows ``found`` per table (each table's pieces are taken
    out as they are converted), names as ids into ``strings``."""
    read = [c for c in dict.fromkeys(read) if c != "kind"]
    columns: dict[str, list[np.ndarray]] = {c: [] for c in ("kind", *read)}
    for name in list(found):
        lake_names = {c.record_column: c.name for c in TABLES[name].columns}
        lake_names = {c: n for c, n in lake_names.items() if c in read}
        for rows in found.pop(name):
            n = rows.num_rows
            columns["kind"].append(np.full(n, _KIND_OF[name], np.int8))
            for c in read:
                if c not in lake_names:
                    columns[c].append(np.zeros(n, LOADED_DTYPES.get(c, np.int64)))
                elif pa.types.is_dictionary(rows.schema.field(lake_names[c]).type):
                    columns[c].append(strings.ids(rows.column(lake_names[c])))
                else:
                    values = numbers(rows.column(lake_names[c]))
                    columns[c].append(values.astype(LOADED_DTYPES.get(c, np.int64), copy=False))
            del rows
    n = sum(p.shape[0] for p in columns["kind"])
    zeros = np.broadcast_to(np.int64(0), (n,))
    # A column none of the tables read has (host columns of GPU-only reads) stays zeros.
    read_tables = tables if tables is not None else list(_KIND_OF)
    present = {c for name in read_tables for c in _RECORD_COLUMNS_OF[name] if c in read} | {"kind"}
    return {
        c: (_joined(columns[c]) if columns.get(c) and c in present else zeros)
        for c in RECORD_COLUMNS
    }


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    """One column of its parts; a single part as it is when it is numpy's own (a batch
    is not copied), a copy of Arrow's read-only buffers as before."""
    return parts[0] if len(parts) == 1 and parts[0].flags.writeable else np.concatenate(parts)


def read_host_samples(parts: StreamParts) -> dict[str, np.ndarray]:
    rows = read_rows(parts, HOST_SAMPLES.name, HOST_COLUMNS)
    if rows is None or not rows.num_rows:
        return empty_host()
    order = np.argsort(numbers(rows.column("time_ns")), kind="stable")
    out = {}
    for c in HOST_COLUMNS:
        dtype = np.float64 if c == "cpu_percent" else np.int64
        out[c] = numbers(rows.column(c)).astype(dtype)[order]
    # Host samples are stored on the collector clock: no shift is left to apply.
    return out
