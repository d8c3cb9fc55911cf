"""Compaction: publishing a stream's acknowledged batches as Parquet segments.

The durable log stays exactly as ingest writes it; compaction only reads it. For one
stream it publishes the batches after the watermark as one segment per table (only the
tables they have rows for), then the per-stream rows that changed, then moves the
watermark (see segments.py for why a crash in between duplicates nothing).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from google.protobuf.message import DecodeError

from tfprof.collector.lake.convert import OutOfRange, StreamCursor
from tfprof.collector.lake.fs import Lake, write_parquet
from tfprof.collector.lake.logstate import LogNotes
from tfprof.collector.lake.schema import DEVICES, GOODBYES, LOG_STATE, STREAMS
from tfprof.collector.lake.segments import (
    SegmentName,
    Watermark,
    partition,
    read_watermark,
    write_watermark,
)
from tfprof.collector.store.catalog import runs
from tfprof.collector.store.loader import stream_dirs

log = logging.getLogger("tfprof.collector.lake")


@dataclass
class Compacted:
    """What one compaction published."""

    batches: int = 0
    records: int = 0
    files: int = 0
    bytes: int = 0

    def add(self, other: Compacted) -> None:
        self.batches += other.batches
        self.records += other.records
        self.files += other.files
        self.bytes += other.bytes


def up_to_date(stream_dir: Path, mark: Watermark) -> bool:
    """Whether the lake has all of the stream, judged by file sizes alone."""
    try:
        size = (stream_dir / "batches.log").stat().st_size
    except FileNotFoundError:
        size = 0
    said_goodbye = (stream_dir / "goodbye.pb").exists()
    return (
        mark.pending is None
        and mark.streams
        and mark.log_state is not None
        and size == mark.log_offset
        and (mark.goodbye or not said_goodbye)
    )


def published_notes(mark: Watermark) -> LogNotes | None:
    """The ``log_state`` row the watermark says is published (None: not worked out)."""
    return None if mark.log_state is None else LogNotes.from_json(mark.log_state)


def compact_stream(
    stream_dir: Path,
    lake: Lake,
    collector: str,
    cursors: dict[Path, StreamCursor] | None = None,
) -> Compacted:
    """Publish what of ``stream_dir``'s log is not in the lake yet. ``cursors``: where
    earlier compactions stopped reading each log, so a running stream's log is not read
    again from the start each time (a cursor is used only where the watermark says)."""
    done = Compacted()
    if not (stream_dir / "hello.pb").exists():
        return done  # not a stream (yet)
    mark = read_watermark(stream_dir) or Watermark(lake.url, collector)
    if up_to_date(stream_dir, mark):
        return done
    if mark.lake != lake.url:
        log.warning("stream %s: compacted into %s so far, from now on into %s",
                    stream_dir, mark.lake, lake.url)  # fmt: skip
        mark.lake = lake.url
    cursor = (cursors or {}).get(stream_dir)
    if cursor is None or cursor.last_seq != mark.last_seq or cursor.offset != mark.log_offset:
        cursor = StreamCursor(stream_dir)
        if cursors is not None:
            cursors[stream_dir] = cursor
    job, run = cursor.hello.job, cursor.hello.run_id
    # A range left pending by a crash is redone exactly, under the same names.
    taken = cursor.take(after=mark.last_seq, upto=mark.pending)
    tables = cursor.tables(taken)
    if taken.batches and mark.pending is None:
        mark.pending = taken.last_seq
        write_watermark(stream_dir, mark)

    def publish(table: str, name: SegmentName, rows: pa.Table) -> None:
        done.bytes += write_parquet(lake, f"{partition(table, job, run)}/{name.file_name}", rows)
        done.files += 1

    stream_id = cursor.hello.stream_id
    if taken.batches:
        name = SegmentName(mark.collector, stream_id, taken.first_seq, taken.last_seq)
        for table, rows in tables.items():
            publish(table, name, rows)
            if table != "host_samples":
                done.records += rows.num_rows
    per_stream = SegmentName(mark.collector, stream_id)
    if not mark.streams:
        publish(STREAMS.name, per_stream, cursor.streams_row(mark.collector))
    devices = sorted(cursor.devices)
    if devices != mark.devices:
        publish(DEVICES.name, per_stream, cursor.devices_rows())
    goodbye = None if mark.goodbye else cursor.goodbye_row()
    if goodbye is not None:
        publish(GOODBYES.name, per_stream, goodbye)
    published = published_notes(mark)
    notes = cursor.notes(published)
    if notes != (published or LogNotes()):
        publish(LOG_STATE.name, per_stream, notes.table(stream_id))
    changed = (
        taken.batches
        or not mark.streams
        or devices != mark.devices
        or goodbye is not None
        or cursor.offset != mark.log_offset
        or mark.log_state is None
        or notes != published
    )
    if not changed:
        return done
    mark.log_state = notes.to_json()
    mark.streams, mark.devices = True, devices
    mark.goodbye = mark.goodbye or goodbye is not None
    if taken.batches:
        mark.last_seq = taken.last_seq
    mark.log_offset, mark.pending = cursor.offset, None
    write_watermark(stream_dir, mark)
    done.batches = taken.batches
    return done


def compact_data_dir(data_dir: Path, lake: Lake, collector: str) -> tuple[Compacted, list[str]]:
    """Compact every stream of a data dir; (what was published, streams that failed)."""
    total, failed = Compacted(), []
    for _job, _run, run_dir in runs(data_dir / "jobs"):
        for stream_dir in stream_dirs(run_dir):
            try:
                total.add(compact_stream(stream_dir, lake, collector))
            except (OutOfRange, DecodeError, ValueError, OSError) as exc:
                log.error("stream %s not compacted: %s", stream_dir, exc)
                failed.append(f"{stream_dir}: {exc}")
    return total, failed
