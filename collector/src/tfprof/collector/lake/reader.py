"""Stored jobs found in the lake: what ``summary``, ``advise`` and ``export`` read
(through the read engine) instead of every data dir's logs loaded whole.

``open_jobs`` resolves every ``--data-dir`` argument (collector data dirs, lake
directories, lake URLs; location.py), reads the small per-stream tables (``streams``,
``devices``, ``goodbyes``) and lists each stream's segment files, the same files the SQL
engine reads (query.py: a data dir's log tail where its watermark stops, never a record
twice). It returns ``JobData`` whose streams are ``LakeStream``s (lake_stream.py): their
identity and files; the read engine (``read/``) reads their records a time chunk at a
time, no reader loads a stream whole.

A stream of the lake is (job, run, stream id): one stream stored by two collectors (an
agent that reconnected elsewhere) reads as one. Runs come in the data dir's order (jobs
by name, runs oldest first); runs found only in lakes follow, by job and run id.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from tfprof.collector.errors import NotFound
from tfprof.collector.jobdata import DeviceMeta, JobData
from tfprof.collector.lake.damaged import READ_ERRORS, DamagedFile, damaged_file, report
from tfprof.collector.lake.fs import Lake, is_url, read_parquet
from tfprof.collector.lake.lake_stream import GPU_TABLES, HOST_TABLES, LakeStream
from tfprof.collector.lake.location import distinct_lakes, resolve
from tfprof.collector.lake.logstate import LogNotes
from tfprof.collector.lake.schema import (
    CAPTURE_WINDOWS,
    DEVICES,
    GOODBYES,
    HOST_SAMPLES,
    LOG_STATE,
    STREAMS,
    TABLES,
)
from tfprof.collector.lake.segments import SegmentName, parse_partition
from tfprof.collector.lake.stream_parts import StreamParts, read_rows
from tfprof.collector.lake.tails import Tails, published, read_tails
from tfprof.collector.store.catalog import runs

log = logging.getLogger("tfprof.collector.lake")

# (job, run, stream id)
StreamKey = tuple[str, str, str]


@dataclass
class LakeJobs:
    """What ``open_jobs`` found: the jobs, and what it had to leave out."""

    jobs: list[JobData]
    skipped: list[str]

    def first_event_ns(self) -> int | None:
        """The earliest record start over every stream (for ``+OFFSET`` times)."""
        return first_event_ns(self.jobs)


def first_event_ns(jobs: Sequence[JobData]) -> int | None:
    """The earliest record start of ``jobs``' lake streams, any kind (what ``+OFFSET``
    times count from, in every command), from the start column alone."""
    import pyarrow.compute as pc  # where used: what reads no offset never loads it

    firsts = []
    for job in jobs:
        for stream in job.streams:
            assert isinstance(stream, LakeStream)
            for table in (*GPU_TABLES, *HOST_TABLES):
                rows = read_rows(stream.parts, table, ["start_ns"])
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
        # Every record table a read lists (lake_catalog.RECORD_TABLES: the hook's STEP
        # records too), and the host samples.
        for table in (*GPU_TABLES, *HOST_TABLES, "steps", HOST_SAMPLES.name):
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
    import pyarrow.compute as pc  # where used, as in lake_stream._Strings.ids

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
        applied_shifts_ns=(_int(hello, "record_shift_ns"), _int(hello, "host_shift_ns")),
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
