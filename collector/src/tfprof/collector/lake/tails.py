"""What a reader of the lake sees, and of each collector data dir named beside it: the
published Parquet files of each table, and the rows of each stream's log that are not in
the lake yet (its tail), read from the log itself. The two never overlap: for a stream
whose log we read, a segment is used only if the stream's watermark (read before
listing) covers it, and the log is read after the watermark.

Both readers build on this: the SQL engine (query.py) and the analyses' stream reader
(reader.py), which needs neither DuckDB nor Arrow datasets.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
from google.protobuf.message import DecodeError

from tfprof.collector.lake.arrays import arrow_strings
from tfprof.collector.lake.convert import OutOfRange, StreamCursor
from tfprof.collector.lake.fs import Lake, list_parquet
from tfprof.collector.lake.publish import published_notes, up_to_date
from tfprof.collector.lake.schema import (
    CAPTURE_WINDOWS,
    DEVICES,
    GOODBYES,
    LOG_STATE,
    STREAMS,
    TABLES,
    Table,
)
from tfprof.collector.lake.segments import (
    SegmentName,
    Watermark,
    collector_id,
    parse_partition,
    read_watermark,
)
from tfprof.collector.store.catalog import runs
from tfprof.collector.store.loader import stream_dirs

log = logging.getLogger("tfprof.collector.lake")

# (job, run, collector, stream id): one stream as the lake names it.
StreamKey = tuple[str, str, str, str]


@dataclass
class LocalStream:
    """A stream whose log we read: what its watermark says is in the lake."""

    mark: Watermark
    lake_devices: bool = True  # the lake's devices file is current (else from the log)
    lake_log_state: bool = True  # the same for the log_state file
    lake_windows: bool = True  # the same for the capture_windows file


@dataclass
class Tails:
    """Rows read from logs, by table, and the streams they came from."""

    streams: dict[StreamKey, LocalStream] = field(default_factory=dict)
    rows: dict[str, list[pa.Table]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)

    def add(self, table: str, job: str, run: str, rows: pa.Table) -> None:
        n = rows.num_rows
        rows = rows.append_column("job", arrow_strings([job] * n))  # no pa.array: pandas
        rows = rows.append_column("run", arrow_strings([run] * n))
        self.rows.setdefault(table, []).append(rows.select(TABLES[table].full_schema.names))


def read_tails(data_dir: Path, tails: Tails | None = None) -> Tails:
    """What of each stream of ``data_dir`` is not in the lake, from its log (added to
    ``tails``, the other data dirs' of one read, when given)."""
    tails = Tails() if tails is None else tails
    collector = collector_id(data_dir) if (data_dir / "collector.id").exists() else "-"
    for job, run, run_dir in runs(data_dir / "jobs"):
        for stream_dir in stream_dirs(run_dir):
            if not (stream_dir / "hello.pb").exists():
                continue
            try:
                _read_tail(stream_dir, job, run, collector, tails)
            except (OutOfRange, DecodeError, ValueError, OSError) as exc:
                log.warning("stream %s left out: %s", stream_dir, exc)
                tails.skipped.append(f"{stream_dir}: {exc}")
    return tails


def _read_tail(stream_dir: Path, job: str, run: str, collector: str, tails: Tails) -> None:
    mark = read_watermark(stream_dir) or Watermark("", collector)
    local = LocalStream(mark)
    tails.streams[(job, run, mark.collector, stream_dir.name)] = local
    if up_to_date(stream_dir, mark):
        return
    cursor = StreamCursor(stream_dir)
    for table, rows in cursor.tables(cursor.take(after=mark.last_seq)).items():
        tails.add(table, job, run, rows)
    if not mark.streams:
        tails.add(STREAMS.name, job, run, cursor.streams_row(mark.collector))
    goodbye = None if mark.goodbye else cursor.goodbye_row()
    if goodbye is not None:
        tails.add(GOODBYES.name, job, run, goodbye)
    if sorted(cursor.devices) != mark.devices:
        local.lake_devices = False
        tails.add(DEVICES.name, job, run, cursor.devices_rows())
    published = published_notes(mark)
    notes = cursor.notes(published)
    if notes != published:
        local.lake_log_state = False
        if not notes.empty:
            tails.add(LOG_STATE.name, job, run, notes.table(cursor.hello.stream_id))
    windows = cursor.window_rows()
    if [list(r) for r in windows] != mark.capture_windows:
        local.lake_windows = False
        tails.add(CAPTURE_WINDOWS.name, job, run, cursor.windows_table(windows))


def published(lake: Lake, table: Table, local: dict[StreamKey, LocalStream]) -> list[str]:
    """The lake's files of ``table`` a reader should see (see the module docstring)."""
    paths = []
    for info in list_parquet(lake, table.name):
        where = parse_partition(info.path)
        name = SegmentName.parse(info.base_name)
        if where is None or name is None:
            continue  # not ours
        stream = local.get((*where, name.collector, name.stream))
        if stream is not None and not _covered(table.name, name, stream):
            continue
        paths.append(info.path)
    return paths


def _covered(table: str, name: SegmentName, stream: LocalStream) -> bool:
    if name.last_seq is not None:
        return name.last_seq <= stream.mark.last_seq
    if table == STREAMS.name:
        return stream.mark.streams
    if table == GOODBYES.name:
        return stream.mark.goodbye
    if table == LOG_STATE.name:
        return stream.lake_log_state
    if table == CAPTURE_WINDOWS.name:
        return stream.lake_windows
    return stream.lake_devices
