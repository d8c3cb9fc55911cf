"""Stored jobs read back from the lake one stream at a time: what ``summary``, ``advise``
and ``export`` analyse instead of every data dir's logs loaded whole.

``open_jobs`` resolves every ``--data-dir`` argument (collector data dirs, lake
directories, lake URLs; location.py), reads the small per-stream tables (``streams``,
``devices``, ``goodbyes``) and lists each stream's segment files, the same files the SQL
engine reads (query.py: a data dir's log tail where its watermark stops, never a record
twice). It returns ``JobData`` whose streams are ``LakeStream``s: their records and host
samples are read only inside ``stream.loaded(...)`` and released when it ends, so a
reader that goes process by process holds one process's records at a time.

A stream of the lake is (job, run, stream id): one stream stored by two collectors (an
agent that reconnected elsewhere) reads as one. Runs come in the data dir's order (jobs
by name, runs oldest first); runs found only in lakes follow, by job and run id.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from tfprof.collector.allocator import map_large_allocations, return_freed_memory
from tfprof.collector.errors import NotFound
from tfprof.collector.jobdata import (
    HOST_COLUMNS,
    RECORD_COLUMNS,
    DeviceMeta,
    JobData,
    StreamData,
    empty_host,
    empty_records,
)
from tfprof.collector.lake.arrays import numbers
from tfprof.collector.lake.damaged import READ_ERRORS, DamagedFile, damaged_file, report
from tfprof.collector.lake.fs import Lake, is_url, parquet_batches, read_parquet
from tfprof.collector.lake.location import distinct_lakes, resolve
from tfprof.collector.lake.logstate import LogNotes
from tfprof.collector.lake.schema import (
    CAPTURE_WINDOWS,
    DEVICES,
    GOODBYES,
    HOST_SAMPLES,
    LOG_STATE,
    RECORD_TABLES,
    STREAMS,
    TABLES,
)
from tfprof.collector.lake.segments import SegmentName, parse_partition
from tfprof.collector.lake.tails import Tails, published, read_tails
from tfprof.collector.store.catalog import runs
from tfprof.core.records import RecordKind

log = logging.getLogger("tfprof.collector.lake")

# (job, run, stream id)
StreamKey = tuple[str, str, str]

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
class StreamParts:
    """Where one stream's rows are: segment files per table and log-tail rows per table."""

    files: dict[str, list[tuple[Lake, str]]] = field(default_factory=dict)
    tails: dict[str, list[pa.Table]] = field(default_factory=dict)
    # Files found unreadable (left out, said once): by path.
    damaged: dict[str, DamagedFile] = field(default_factory=dict)

    def read_file(
        self, lake: Lake, path: str, table: str, columns: Sequence[str]
    ) -> pa.Table | None:
        """One file's rows, or None (reported, remembered) when it cannot be read."""
        if path in self.damaged:
            return None
        try:
            return read_parquet(lake, path, TABLES[table].schema, columns)
        except READ_ERRORS as exc:
            self.note_damage(lake, path, exc)
            return None

    def note_damage(self, lake: Lake, path: str, exc: BaseException) -> None:
        found = self.damaged[path] = damaged_file(lake, path, exc)
        report(found)

    def tables(self) -> set[str]:
        return set(self.files) | set(self.tails)


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
            return_freed_memory()

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

    def host_batches(
        self, columns: Sequence[str], batch_rows: int
    ) -> Iterator[tuple[dict[str, np.ndarray], list[str]]]:
        """The stream's host records (API calls, then ranges, then memory records) in
        batches of at most ``batch_rows`` rows, without loading the stream: each as
        ``read_records`` gives it, with the stream's string table so far."""
        strings = _Strings()
        for table in HOST_TABLES:
            for rows in _batches(self.parts, table, _lake_names(table, columns), batch_rows):
                records = _records({table: [rows]}, columns, strings, (table,))
                del rows
                yield records, strings.strings
            return_freed_memory()

    def record_times(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(start_ns, duration_ns) of the stream's records, a table at a time, without
        loading it (the export's pass for its time origin)."""
        for table in (*GPU_TABLES, *HOST_TABLES):
            rows = _read(self.parts, table, ["start_ns", "duration_ns"])
            if rows is not None and rows.num_rows:
                yield numbers(rows.column("start_ns")), numbers(rows.column("duration_ns"))
            del rows
            return_freed_memory()

    def host_sample_times(self) -> np.ndarray:
        rows = _read(self.parts, HOST_SAMPLES.name, ["time_ns"])
        if rows is None:
            return np.zeros(0, np.int64)
        times = numbers(rows.column("time_ns"))
        return times


def _read(parts: StreamParts, table: str, columns: Sequence[str]) -> pa.Table | None:
    """The stream's rows of ``table`` (segments in batch order, then the log tail); a
    file that cannot be read is left out (``StreamParts.damaged``)."""
    pieces = []
    by_lake: dict[int, tuple[Lake, list[str]]] = {}
    for lake, path in parts.files.get(table, ()):
        by_lake.setdefault(id(lake), (lake, []))[1].append(path)
    for lake, paths in by_lake.values():
        for path in sorted(paths):
            rows = parts.read_file(lake, path, table, columns)
            if rows is not None:
                pieces.append(rows)
    pieces += [t.select(list(columns)) for t in parts.tails.get(table, ())]
    if not pieces:
        return None
    return pa.concat_tables(pieces) if len(pieces) > 1 else pieces[0]


def _batches(
    parts: StreamParts, table: str, columns: Sequence[str], batch_rows: int
) -> Iterator[pa.Table]:
    """The stream's rows of ``table`` as ``_read`` gives them, ``batch_rows`` at most at a
    time (segments record batch by record batch, then the log tail)."""
    schema = TABLES[table].schema
    by_lake: dict[int, tuple[Lake, list[str]]] = {}
    for lake, path in parts.files.get(table, ()):
        by_lake.setdefault(id(lake), (lake, []))[1].append(path)
    for lake, paths in by_lake.values():
        for path in sorted(paths):
            if path in parts.damaged:
                continue
            try:
                yield from parquet_batches(lake, path, schema, columns, batch_rows)
            except READ_ERRORS as exc:  # what it yielded before stays: said, and left
                parts.note_damage(lake, path, exc)
    for tail in parts.tails.get(table, ()):
        for lo in range(0, tail.num_rows, batch_rows):
            yield tail.select(list(columns)).slice(lo, batch_rows)


class _Strings:
    """A stream-local string table rebuilt from dictionary-encoded name columns."""

    def __init__(self) -> None:
        self.strings = [""]
        self._ids = {"": 0}

    def ids(self, column: pa.ChunkedArray) -> np.ndarray:
        out = []
        for chunk in column.chunks:
            if not isinstance(chunk, pa.DictionaryArray):
                # Imported where used: ~25 ms that reading segments (summary, advise,
                # export: dictionary columns) does not need.
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
        rows = _read(parts, name, _lake_names(name, read))
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
    rows = _read(parts, HOST_SAMPLES.name, HOST_COLUMNS)
    if rows is None or not rows.num_rows:
        return empty_host()
    order = np.argsort(numbers(rows.column("time_ns")), kind="stable")
    out = {}
    for c in HOST_COLUMNS:
        dtype = np.float64 if c == "cpu_percent" else np.int64
        out[c] = numbers(rows.column(c)).astype(dtype)[order]
    # Host samples are stored on the collector clock: no shift is left to apply.
    return out


@dataclass
class LakeJobs:
    """What ``open_jobs`` found: the jobs, and what it had to leave out."""

    jobs: list[JobData]
    skipped: list[str]

    def first_event_ns(self) -> int | None:
        """The earliest record start over every stream (for ``+OFFSET`` times)."""
        import pyarrow.compute as pc  # where used, as in _Strings.ids

        firsts = []
        for job in self.jobs:
            for stream in job.streams:
                assert isinstance(stream, LakeStream)
                for table in (*GPU_TABLES, *HOST_TABLES):
                    rows = _read(stream.parts, table, ["start_ns"])
                    if rows is not None and rows.num_rows:
                        firsts.append(pc.min(rows.column("start_ns")).as_py())
        return min(firsts) if firsts else None


class _Found:
    """Streams as found while listing the sources, by key, in discovery order."""

    def __init__(self) -> None:
        self.parts: dict[StreamKey, StreamParts] = {}
        self.order: list[tuple[str, str]] = []  # runs in data-dir order
        self.notes: dict[StreamKey, list[LogNotes]] = {}  # log_state rows
        self.windows: dict[StreamKey, list[tuple[str, str, int, int]]] = {}

    def stream(self, key: StreamKey) -> StreamParts:
        found = self.parts.get(key)
        if found is None:
            found = self.parts[key] = StreamParts()
        return found


def open_jobs(arguments: Sequence[str], names: Sequence[str] | None = None) -> LakeJobs:
    """Every run of the named jobs (all when none is named) across ``arguments``."""
    for argument in arguments:  # a typo names nothing and creates nothing
        local = argument.removeprefix("file://")
        if not is_url(local) and not Path(local).is_dir():
            raise NotFound(f"no such data dir: {argument}")
    map_large_allocations()
    sources = [resolve(a) for a in arguments]
    found = _Found()
    tails = Tails()
    for source in sources:
        if source.data_dir is None:
            continue
        read_tails(source.data_dir, tails)
        for job, run, _run_dir in runs(source.data_dir / "jobs"):
            if (job, run) not in found.order:
                found.order.append((job, run))
    lakes = distinct_lakes(sources)
    for lake in lakes:
        for table in (*GPU_TABLES, *HOST_TABLES, HOST_SAMPLES.name):
            for path in published(lake, TABLES[table], tails.streams):
                where, segment = parse_partition(path), SegmentName.parse(path.rsplit("/", 1)[-1])
                if where is None or segment is None:
                    continue
                found.stream((*where, segment.stream)).files.setdefault(table, []).append(
                    (lake, path)
                )
    for table, pieces in tails.rows.items():
        if table in PER_STREAM_TABLES:
            continue
        for rows in pieces:
            for key, part in _split_by_stream(rows):
                found.stream(key).tails.setdefault(table, []).append(part)
    damaged: list[DamagedFile] = []
    meta = {t: _metadata(lakes, tails, t, damaged) for t in sorted(PER_STREAM_TABLES)}
    jobs = _jobs(found, meta, names)
    by_run = {(j.name, j.run_id): j for j in jobs}
    for what in damaged:  # a stream's small table: what it says of the stream is lost
        owner = by_run.get((what.job, what.run))
        if owner is not None:
            owner.skipped.append(f"{what.path}: {what.reason}")
    skipped = list(tails.skipped)
    _note_left_out(jobs, skipped)
    return LakeJobs(jobs, skipped)


PER_STREAM_TABLES = frozenset(
    {STREAMS.name, DEVICES.name, GOODBYES.name, LOG_STATE.name, CAPTURE_WINDOWS.name}
)


def _split_by_stream(rows: pa.Table) -> Iterator[tuple[StreamKey, pa.Table]]:
    keys = pa.Table.from_arrays(
        [rows.column("job"), rows.column("run"), rows.column("stream_id").cast(pa.string())],
        names=["job", "run", "stream_id"],
    )
    import pyarrow.compute as pc  # where used, as in _Strings.ids

    for key in keys.group_by(["job", "run", "stream_id"]).aggregate([]).to_pylist():
        mask = pc.and_(
            pc.and_(pc.equal(keys.column("job"), key["job"]),
                    pc.equal(keys.column("run"), key["run"])),
            pc.equal(keys.column("stream_id"), key["stream_id"]),
        )  # fmt: skip
        yield (key["job"], key["run"], key["stream_id"]), rows.filter(mask)


def _metadata(
    lakes: list[Lake], tails: Tails, table: str, damaged: list[DamagedFile]
) -> list[dict[str, object]]:
    """Every row of a small per-stream table: the lakes' files (job and run from their
    partition path), then the log tails'. A file that cannot be read is left out and
    said (``damaged``): only that stream's row is lost."""
    schema = TABLES[table].schema
    rows: list[dict[str, object]] = []
    for lake in lakes:
        for path in published(lake, TABLES[table], tails.streams):
            where = parse_partition(path)
            if where is None:
                continue
            try:
                part = read_parquet(lake, path, schema, schema.names).to_pylist()
            except READ_ERRORS as exc:
                damaged.append(damaged_file(lake, path, exc))
                report(damaged[-1])
                continue
            rows += [{"job": where[0], "run": where[1], **row} for row in part]
    for part in tails.rows.get(table, ()):
        rows += part.to_pylist()
    return rows


def _jobs(
    found: _Found, meta: dict[str, list[dict[str, object]]], names: Sequence[str] | None
) -> list[JobData]:
    hellos: dict[StreamKey, dict[str, object]] = {}
    for row in meta[STREAMS.name]:
        hellos.setdefault((str(row["job"]), str(row["run"]), str(row["stream_id"])), row)
    for key, parts in found.parts.items():
        if key not in hellos and parts.tables():
            # Its streams row could not be read: its records still can, under its id.
            hellos[key] = {"host": "", "task": key[2], "pid": 0, "source": "", "argv": []}
    if names:
        missing = set(names) - {job for job, _, _ in hellos}
        if missing:
            raise NotFound(f"no such job: {', '.join(sorted(missing))}")
    devices: dict[StreamKey, dict[int, DeviceMeta]] = {}
    for row in meta[DEVICES.name]:
        key = (str(row["job"]), str(row["run"]), str(row["stream_id"]))
        devices.setdefault(key, {})[int(row["ordinal"])] = _device(row)  # type: ignore[call-overload]
    goodbyes = {(str(r["job"]), str(r["run"]), str(r["stream_id"])): r for r in meta[GOODBYES.name]}
    for row in meta[LOG_STATE.name]:
        key = (str(row["job"]), str(row["run"]), str(row["stream_id"]))
        found.notes.setdefault(key, []).append(LogNotes.from_row(row))
    for row in meta[CAPTURE_WINDOWS.name]:
        key = (str(row["job"]), str(row["run"]), str(row["stream_id"]))
        window = (str(row["mode"] or ""), str(row["capture_id"] or ""))
        span = (_int(row, "start_ns"), _int(row, "end_ns"))
        found.windows.setdefault(key, []).append((*window, *span))
    order = list(found.order)
    order += sorted({(j, r) for j, r, _ in hellos} - set(order))
    jobs: list[JobData] = []
    for job_name, run in order:
        if names and job_name not in names:
            continue
        keys = sorted(k for k in hellos if k[:2] == (job_name, run))
        if not keys and (job_name, run) not in found.order:
            continue  # a data dir's run stays, without streams, to say what was left out
        job = JobData(name=job_name, run_id=run)
        for key in keys:
            job.streams.append(
                _stream(key, hellos[key], devices.get(key, {}), goodbyes.get(key), found)
            )
        jobs.append(job)
    return jobs


def _device(row: dict[str, object]) -> DeviceMeta:
    def num(name: str) -> int:
        value = row[name]
        return int(value) if isinstance(value, int) else 0

    return DeviceMeta(
        ordinal=num("ordinal"),
        uuid=str(row["uuid"] or ""),
        name=str(row["name"] or ""),
        pci_bus_id=str(row["pci_bus_id"] or ""),
        compute_capability=(num("compute_capability_major"), num("compute_capability_minor")),
        sm_count=num("sm_count"),
        memory_bytes=num("memory_bytes"),
    )


def _int(row: dict[str, object] | None, name: str) -> int:
    value = row.get(name) if row else None
    return int(value) if isinstance(value, int) else 0


def _stream(
    key: StreamKey,
    hello: dict[str, object],
    devices: dict[int, DeviceMeta],
    goodbye: dict[str, object] | None,
    found: _Found,
) -> LakeStream:
    argv = hello.get("argv")
    stream = LakeStream(
        job=key[0],
        run_id=key[1],
        host=str(hello["host"] or ""),
        pid=_int(hello, "pid"),
        task=str(hello["task"] or ""),
        argv=[str(a) for a in argv] if isinstance(argv, list) else [],
        source=str(hello["source"] or ""),
        record_shift_ns=0,  # the lake's times are on the collector clock already
        host_shift_ns=0,
        clock_rtt_ns=_int(hello, "clock_rtt_ns"),
        devices=devices,
        parts=found.parts.get(key, StreamParts()),
    )
    stream.finished = goodbye is not None
    stream.exit_code = _int(goodbye, "exit_code") if goodbye is not None else None
    stream.dropped.queue = _int(goodbye, "dropped_queue")
    stream.dropped.tracer = _int(goodbye, "dropped_tracer")
    stream.dropped.relay = _int(goodbye, "dropped_relay")
    for notes in found.notes.get(key, ()):  # what its log says beyond its records
        notes.apply(stream)
    stream.capture_windows = sorted(found.windows.get(key, ()), key=lambda w: w[2])
    return stream


def _note_left_out(jobs: list[JobData], skipped: list[str]) -> None:
    """Streams the log reader left out (``<stream dir>: <why>``), on their job."""
    by_run = {(j.name, j.run_id): j for j in jobs}
    for what in skipped:
        path, _, why = what.partition(": ")
        parts = Path(path).parts
        job = by_run.get((parts[-3], parts[-2])) if len(parts) >= 3 else None
        if job is not None:
            job.skipped.append(f"{parts[-1]}: {why}")
