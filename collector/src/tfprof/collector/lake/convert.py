"""One stream's log, read in order, as Arrow tables of the lake's schema.

``StreamCursor`` walks batches.log from where it stopped, keeping what later batches
need from earlier ones (the string table, the latest clock estimate, the devices), the
same way store/loader.py reads a stream; ``take`` returns the records of a range of
batches as one Arrow table per lake table, ``take_chunks`` the same a bounded number of
records at a time (a batch bigger than a chunk is cut by rows), so compacting a range
holds a chunk's columns, never the whole range's. Times come out on the collector clock.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
from google.protobuf.message import DecodeError

from tfprof.collector.jobdata import HOST_COLUMNS, RECORD_COLUMNS
from tfprof.collector.lake.arrays import arrow_numbers, arrow_strings
from tfprof.collector.lake.collective_columns import expand
from tfprof.collector.lake.logstate import LogNotes, notes_of
from tfprof.collector.lake.schema import (
    CAPTURE_WINDOWS,
    DEVICES,
    GOODBYES,
    HOST_SAMPLES,
    RECORD_TABLES,
    RESOLVED,
    STACK_SAMPLES,
    STACKS,
    STREAMS,
    Column,
    Table,
)
from tfprof.collector.lake.stack_rows import StackRows
from tfprof.collector.store.loader import check_int64, record_shift
from tfprof.collector.store.traced_windows import Row, edge_of, stream_windows
from tfprof.core import batchlog
from tfprof.proto import collector_pb2 as pb


class OutOfRange(ValueError):
    """A value that does not fit its lake column's type (CUDA never makes one)."""


@dataclass
class Range:
    """The batches of one compaction range, as columns; ``last_seq`` 0: none."""

    first_seq: int = 0
    last_seq: int = 0
    batches: int = 0
    records: dict[str, list[np.ndarray]] = field(
        default_factory=lambda: {c: [] for c in RECORD_COLUMNS}
    )
    host: dict[str, list[np.ndarray]] = field(default_factory=lambda: {c: [] for c in HOST_COLUMNS})
    stacks: dict[str, np.ndarray] | None = None  # stack_rows.STACK_COLUMNS
    stack_samples: dict[str, np.ndarray] | None = None  # stack_rows.SAMPLE_COLUMNS


class StreamCursor:
    """Reads one stream directory's batches.log forward, batch by batch."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.hello = pb.Hello.FromString((directory / "hello.pb").read_bytes())
        self.task = self.hello.task or str(self.hello.pid)
        self.record_shift = check_int64("record clock shift", record_shift(self.hello))
        self.strings: list[str] = [""]
        self.clock_delta = 0  # a batch's fresh clock estimate minus the hello's
        self.devices: dict[int, pb.Device] = {d.ordinal: d for d in self.hello.devices}
        self.last_seq = 0
        self.dropped = 0  # the latest cumulative ``Batch.dropped``
        self.stack_rows = StackRows()  # frames and stack depths defined so far
        self.edges: list[tuple[bool, int]] = []  # capture edges, collector clock
        self.offset = 0  # where the next unread entry starts
        # Damaged ranges skipped before ``offset`` (each followed by a good entry), and
        # the unreadable bytes after the last good entry at the end of the latest read
        # (an entry being written, or a crash's torn tail).
        self.damage: list[batchlog.Damage] = []
        self.trailing: batchlog.Damage | None = None

    def _entries(self) -> Iterator[tuple[int, bytes]]:
        """(end offset, payload) of each good entry from ``self.offset`` on; stops at a
        torn tail (an entry still being written)."""
        path = self.directory / "batches.log"
        try:
            with open(path, "rb") as f:
                header = f.read(len(batchlog.MAGIC))
                version = batchlog.version_of(header)
                prefix = header if version == batchlog.V2 else b""
                start = max(self.offset, len(prefix))
                f.seek(start)
                data = prefix + f.read()
        except FileNotFoundError:
            return
        base = start - len(prefix)  # file offset of data[0]
        scan = batchlog.Scan(version, 0)
        read_to_end = False
        try:
            for offset, payload in batchlog.entries(data, len(prefix), scan):
                yield base + offset + batchlog.entry_size(len(payload), version), payload
            read_to_end = True
        finally:  # also when the reader stops early: what it passed stays noted
            self.trailing = None
            for d in scan.damage:
                found = batchlog.Damage(base + d.offset, d.nbytes, d.reason)
                if found.offset + found.nbytes <= self.offset:
                    self.damage.append(found)
                elif read_to_end:
                    self.trailing = found

    def take(self, after: int, upto: int | None = None) -> Range:
        """Read on; batches up to ``after`` only update the cursor's state, the rest up to
        ``upto`` (all, when None) are returned. The cursor stops after ``upto``."""
        taken = Range()
        for end, payload in self._entries():
            try:
                batch = pb.Batch.FromString(payload)
            except DecodeError:
                self.offset = end  # checksummed but unparsable: as the loader, skip it
                continue
            if upto is not None and batch.seq > upto:
                break
            self.offset = end
            if batch.seq <= self.last_seq:
                continue  # a duplicate entry from an older release
            self.last_seq = batch.seq
            self._absorb(batch)
            if batch.HasField("stacks"):
                shift = self.hello.clock_offset_ns + self.clock_delta  # as host samples
                self.stack_rows.absorb(batch.stacks, batch.seq > after, shift)
            if batch.seq > after:
                self._collect(batch, taken)
        taken.stacks, taken.stack_samples = self.stack_rows.take()
        return taken

    def peek_seq(self, after: int, upto: int | None) -> int | None:
        """The seq of the first batch after ``after`` (up to ``upto``), read without
        moving the cursor; None when there is none."""
        for _end, payload in self._entries():
            try:
                seq = pb.Batch.FromString(payload).seq
            except DecodeError:
                continue
            if upto is not None and seq > upto:
                return None
            if seq > after:
                return seq
        return None

    def take_chunks(
        self, after: int, upto: int | None, chunk_rows: int, span: Range
    ) -> Iterator[Range]:
        """``take``, ``chunk_rows`` records (or fewer) at a time; ``span`` gathers the
        first and last seq and the batch count of the whole range. Each chunk's
        ``first_seq``/``last_seq`` are the batches it holds rows of."""
        chunk, rows = Range(), 0
        for end, payload in self._entries():
            try:
                batch = pb.Batch.FromString(payload)
            except DecodeError:
                self.offset = end
                continue
            if upto is not None and batch.seq > upto:
                break
            self.offset = end
            if batch.seq <= self.last_seq:
                continue
            self.last_seq = batch.seq
            self._absorb(batch)
            if batch.HasField("stacks"):
                shift = self.hello.clock_offset_ns + self.clock_delta  # as host samples
                self.stack_rows.absorb(batch.stacks, batch.seq > after, shift)
            if batch.seq <= after:
                continue
            span.first_seq = span.first_seq or batch.seq
            span.last_seq = batch.seq
            span.batches += 1
            n, lo = len(batch.records.kind), 0
            while True:
                hi = min(n, lo + chunk_rows - rows)
                self._collect(batch, chunk, lo, hi)
                rows += hi - lo
                lo = hi
                if rows >= chunk_rows:
                    chunk.stacks, chunk.stack_samples = self.stack_rows.take()
                    yield chunk
                    chunk, rows = Range(), 0
                if lo >= n:
                    break
        if chunk.batches:
            chunk.stacks, chunk.stack_samples = self.stack_rows.take()
            yield chunk

    def _absorb(self, batch: pb.Batch) -> None:
        if batch.clock_updated:
            self.clock_delta = batch.clock_offset_ns - self.hello.clock_offset_ns
        if batch.strings:
            while len(self.strings) < batch.string_base:
                self.strings.append(f"<unknown name {len(self.strings)}>")
            end = batch.string_base + len(batch.strings)
            self.strings[batch.string_base : end] = list(batch.strings)
        for d in batch.devices:
            self.devices[d.ordinal] = d
        self.dropped = max(self.dropped, batch.dropped)
        shift = self.hello.clock_offset_ns + self.clock_delta  # as host samples shift
        self.edges += [edge_of(e, shift) for e in batch.capture_edges]

    def _collect(self, batch: pb.Batch, taken: Range, lo: int = 0, hi: int | None = None) -> None:
        """Rows ``lo:hi`` of the batch's records (all by default); its host samples go
        with its first rows."""
        if taken.last_seq != batch.seq:
            taken.first_seq = taken.first_seq or batch.seq
            taken.last_seq = batch.seq
            taken.batches += 1
        n = len(batch.records.kind)
        hi = n if hi is None else hi
        if hi > lo:
            whole = lo == 0 and hi == n
            for col in RECORD_COLUMNS:
                values = getattr(batch.records, col)
                if not len(values):
                    part = np.zeros(hi - lo, np.int64)
                else:
                    part = np.array(values if whole else values[lo:hi], np.int64)
                if col == "start_ns":
                    part += self.record_shift + self.clock_delta
                taken.records[col].append(part)
        if lo == 0 and len(batch.host.time_ns):
            for col in HOST_COLUMNS:
                dtype = np.float32 if col == "cpu_percent" else np.int64
                part = np.array(getattr(batch.host, col), dtype)
                if col == "time_ns":
                    part += self.hello.clock_offset_ns + self.clock_delta
                taken.host[col].append(part)

    # -- Arrow tables -----------------------------------------------------------------

    def tables(self, taken: Range) -> dict[str, pa.Table]:
        """The range's non-empty record and host-sample tables, by lake table name."""
        out: dict[str, pa.Table] = {}
        if taken.records["kind"]:
            cols = {c: np.concatenate(parts) for c, parts in taken.records.items()}
            kinds = cols["kind"]
            for kind, table in RECORD_TABLES.items():
                rows = np.flatnonzero(kinds == kind)
                if len(rows):
                    out[table.name] = self._table(table, {c: v[rows] for c, v in cols.items()})
        if taken.host["time_ns"]:
            host = {c: np.concatenate(parts) for c, parts in taken.host.items()}
            out[HOST_SAMPLES.name] = self._table(HOST_SAMPLES, host)
        if taken.stacks is not None:
            out[STACKS.name] = self._table(STACKS, taken.stacks)
        if taken.stack_samples is not None:
            out[STACK_SAMPLES.name] = self._table(STACK_SAMPLES, taken.stack_samples)
        return out

    def _table(self, table: Table, cols: dict[str, np.ndarray]) -> pa.Table:
        identity = {"stream_id": self.hello.stream_id, "host": self.hello.host, "task": self.task}
        return lake_table(table, cols, identity, self.strings)

    # -- per-stream rows --------------------------------------------------------------

    def streams_row(self, collector: str) -> pa.Table:
        h = self.hello
        row = {
            "stream_id": h.stream_id, "collector": collector, "host": h.host,
            "task": self.task, "pid": h.pid, "ppid": h.ppid, "argv": list(h.argv),
            "source": h.source, "agent_version": h.agent_version,
            "record_shift_ns": self.record_shift, "host_shift_ns": h.clock_offset_ns,
            "clock_rtt_ns": h.clock_rtt_ns,
        }  # fmt: skip
        return pa.Table.from_pylist([row], schema=STREAMS.schema)

    def devices_rows(self) -> pa.Table:
        rows = [self._device_row(d) for _, d in sorted(self.devices.items())]
        return pa.Table.from_pylist(rows, schema=DEVICES.schema)

    def _device_row(self, d: pb.Device) -> dict[str, object]:
        return {
            "stream_id": self.hello.stream_id, "host": self.hello.host,
            "ordinal": d.ordinal, "uuid": d.uuid, "name": d.name,
            "pci_bus_id": d.pci_bus_id,
            "compute_capability_major": d.compute_capability_major,
            "compute_capability_minor": d.compute_capability_minor,
            "sm_count": d.sm_count, "memory_bytes": d.memory_bytes,
        }  # fmt: skip

    def window_rows(self) -> list[Row]:
        """The stream's ``capture_windows`` rows as of what the cursor has read."""
        return stream_windows(self.directory, self.hello, self.edges, self.record_shift)

    def windows_table(self, rows: list[Row]) -> pa.Table:
        return window_table(self.hello.stream_id, rows)

    def goodbye_unreadable(self) -> bool:
        try:
            pb.Goodbye.FromString((self.directory / "goodbye.pb").read_bytes())
        except FileNotFoundError:
            return False
        except DecodeError:
            return True
        return False

    def notes(self, published: LogNotes | None) -> LogNotes:
        """The stream's ``log_state`` row as of what the cursor has read."""
        return notes_of(self.directory, self.dropped, self.goodbye_unreadable(),
                        self.damage, self.trailing, published)  # fmt: skip

    def goodbye_row(self) -> pa.Table | None:
        """The goodbyes row once the stream said goodbye; None before (or when the file
        cannot be parsed: the stream then counts as unfinished, as the loader has it)."""
        try:
            bye = pb.Goodbye.FromString((self.directory / "goodbye.pb").read_bytes())
        except (FileNotFoundError, DecodeError):
            return None
        row = {
            "stream_id": self.hello.stream_id, "records_sent": bye.records_sent,
            "dropped_queue": max(bye.dropped_queue, self.dropped),
            "dropped_tracer": bye.dropped_tracer, "dropped_relay": bye.dropped_relay,
            "exit_code": bye.exit_code,
            "dropped_stack_samples": max(bye.dropped_stack_samples, self.stack_rows.dropped),
        }  # fmt: skip
        return pa.Table.from_pylist([row], schema=GOODBYES.schema)


def lake_table(
    table: Table, cols: dict[str, np.ndarray], identity: dict[str, str], strings: list[str]
) -> pa.Table:
    """Record (or host-sample) columns of one stream as ``table``'s Arrow table:
    ``identity`` fills ``stream_id``, ``host`` and ``task``; names resolve through
    ``strings`` (the stream's string table, placeholders appended for ids past it)."""
    n = len(next(iter(cols.values())))
    # The collective columns are spread from one record column (collective_columns.py).
    expanded = [c for c in table.columns if c.expands]
    fields = expand(cols["collective"], strings, expanded) if expanded else {}
    arrays = [
        fields[c.name] if c.expands else _array(c, cols, n, identity, strings)
        for c in table.columns
    ]
    return pa.Table.from_arrays(arrays, schema=table.schema)


def _array(
    column: Column, cols: dict[str, np.ndarray], n: int, identity: dict[str, str],
    strings: list[str],
) -> pa.Array:  # fmt: skip
    # Built from buffers, not pa.array: that would import pandas (lake/arrays.py).
    if column.name in identity:
        return pa.DictionaryArray.from_arrays(
            arrow_numbers(np.zeros(n, np.int32), pa.int32()), arrow_strings([identity[column.name]])
        )
    values = cols[column.record_column]
    if column.name in RESOLVED:
        return _names(values, strings)
    if pa.types.is_floating(column.type):
        return arrow_numbers(values, column.type)
    info = np.iinfo(column.type.to_pandas_dtype())
    if len(values) and (int(values.min()) < info.min or int(values.max()) > info.max):
        bad = int(values.max()) if int(values.max()) > info.max else int(values.min())
        raise OutOfRange(
            f"stream {identity['stream_id']}: {column.name} {bad} does not fit {column.type}"
        )
    return arrow_numbers(values, column.type)


def _names(indices: np.ndarray, strings: list[str]) -> pa.DictionaryArray:
    """String-table indices as a dictionary of only the names used."""
    used, local = np.unique(indices, return_inverse=True)
    top = int(used.max()) if len(used) else 0
    while len(strings) <= top:
        strings.append(f"<unknown name {len(strings)}>")
    names = [strings[i] for i in used.tolist()]
    return pa.DictionaryArray.from_arrays(
        arrow_numbers(local.astype(np.int32).reshape(-1), pa.int32()), arrow_strings(names)
    )


def window_table(stream_id: str, rows: Sequence[Row]) -> pa.Table:
    columns = {
        "stream_id": arrow_strings([stream_id] * len(rows)),
        "mode": arrow_strings([r[0] for r in rows]),
        "capture_id": arrow_strings([r[1] for r in rows]),
        "start_ns": arrow_numbers(np.array([r[2] for r in rows], np.int64), pa.int64()),
        "end_ns": arrow_numbers(np.array([r[3] for r in rows], np.int64), pa.int64()),
    }
    return pa.Table.from_arrays(list(columns.values()), schema=CAPTURE_WINDOWS.schema)
