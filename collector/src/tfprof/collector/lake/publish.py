"""Compaction: publishing a stream's acknowledged batches as Parquet segments.

The durable log stays exactly as ingest writes it; compaction only reads it. For one
stream it publishes the batches after the watermark as one segment per table (only the
tables they have rows for; record tables' row groups sorted by start, as their footers
say), then the per-stream rows that changed, then moves the
watermark (see segments.py for why a crash in between duplicates nothing).

Memory is bounded by ``CHUNK_ROWS``, not by the range or by any one batch: the range is
converted and written a chunk at a time (segment_files.py). What can still never be
compacted is quarantined with one line, not retried into a crash loop: a chunk whose
values do not fit the lake's types (its batches), and the next batch after a range whose
compaction was begun ``MAX_ATTEMPTS`` times and never finished (the collector was killed
in it, as the kernel's OOM killer does). Quarantined batches stay in batches.log.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from google.protobuf.message import DecodeError

from tfprof.collector.lake.convert import OutOfRange, Range, StreamCursor
from tfprof.collector.lake.damaged import segments_table
from tfprof.collector.lake.fs import Lake, write_parquet
from tfprof.collector.lake.logstate import LogNotes
from tfprof.collector.lake.schema import (
    CAPTURE_WINDOWS,
    DEVICES,
    GOODBYES,
    LOG_STATE,
    RECORD_TABLES,
    SEGMENTS,
    STREAMS,
)
from tfprof.collector.lake.segment_files import SegmentFiles
from tfprof.collector.lake.segments import (
    SegmentName,
    Watermark,
    partition,
    read_watermark,
    write_watermark,
)
from tfprof.collector.store.catalog import runs
from tfprof.collector.store.loader import stream_dirs
from tfprof.core import batchlog

RECORD_TABLE_NAMES = frozenset(t.name for t in RECORD_TABLES.values())
log = logging.getLogger("tfprof.collector.lake")

# Records converted at a time: ~60 MiB of int64 columns in the lake's shape, a few times
# that at the peak of a chunk's conversion, whatever the range or one batch holds.
CHUNK_ROWS = 1 << 18
MAX_ATTEMPTS = 2


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
        and mark.capture_windows is not None
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
    counted = _count_attempt(stream_dir, mark, cursor)
    try:
        return _compact(stream_dir, lake, mark, cursor, cursors)
    except MemoryError:
        raise  # counts as an attempt that never finished
    except BaseException:
        # An error we report (the lake unreachable, a full disk) is no sign of a range
        # that cannot be compacted: only a kill mid-way leaves the attempt counted.
        if counted:
            with contextlib.suppress(OSError, ValueError):
                _clear_attempts(stream_dir)
        raise


def _compact(
    stream_dir: Path,
    lake: Lake,
    mark: Watermark,
    cursor: StreamCursor,
    cursors: dict[Path, StreamCursor] | None,
) -> Compacted:
    done = Compacted()
    job, run = cursor.hello.job, cursor.hello.run_id
    stream_id = cursor.hello.stream_id

    def publish(table: str, name: SegmentName, rows: pa.Table) -> None:
        done.bytes += write_parquet(lake, f"{partition(table, job, run)}/{name.file_name}", rows)
        done.files += 1

    # A range left pending by a crash is redone exactly, under the same names.
    taken = Range()
    files = SegmentFiles(lake, job, run)
    try:
        chunks = cursor.take_chunks(mark.last_seq, mark.pending, CHUNK_ROWS, taken)
        for chunk in chunks:
            try:
                tables = cursor.tables(chunk)
            except OutOfRange as exc:
                files.abort()
                _quarantine(stream_dir, mark, chunk.first_seq, chunk.last_seq, str(exc))
                if cursors is not None:
                    cursors.pop(stream_dir, None)
                return done
            for table, rows in tables.items():
                if table not in RECORD_TABLE_NAMES:  # host samples, Python stacks
                    files.add(table, rows)
                    continue
                files.add(table, rows, sorted_by="start_ns")
                done.records += rows.num_rows
        if taken.batches and mark.pending is None:
            mark.pending = taken.last_seq
            write_watermark(stream_dir, mark)
        if taken.batches:
            name = SegmentName(mark.collector, stream_id, taken.first_seq, taken.last_seq)
            written = files.publish(name)
            done.files += len(written)
            done.bytes += sum(w[3] for w in written)
            # The range's bookkeeping, after its files: what a reader that cannot read
            # one says it held.
            book = segments_table(stream_id, taken.first_seq, taken.last_seq, written)
            publish(SEGMENTS.name, name, book)
    finally:
        files.abort()
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
    rows = cursor.window_rows()
    windows = [list(r) for r in rows]  # as the watermark keeps them (JSON)
    if windows != mark.capture_windows:
        publish(CAPTURE_WINDOWS.name, per_stream, cursor.windows_table(rows))
    changed = (
        taken.batches
        or not mark.streams
        or devices != mark.devices
        or goodbye is not None
        or cursor.offset != mark.log_offset
        or mark.log_state is None
        or notes != published
        or windows != mark.capture_windows
    )
    if not changed:
        if mark.attempts:
            mark.attempt_after, mark.attempts = -1, 0
            write_watermark(stream_dir, mark, durable=False)
        return done
    mark.capture_windows = windows
    mark.log_state = notes.to_json()
    mark.streams, mark.devices = True, devices
    mark.goodbye = mark.goodbye or goodbye is not None
    if taken.batches:
        mark.last_seq = taken.last_seq
    mark.log_offset, mark.pending = cursor.offset, None
    mark.attempt_after, mark.attempts = -1, 0
    write_watermark(stream_dir, mark)
    done.batches = taken.batches
    return done


def _count_attempt(stream_dir: Path, mark: Watermark, cursor: StreamCursor) -> bool:
    """Note one more compaction begun after ``mark.last_seq`` (True), where the log holds
    batches past the watermark; after ``MAX_ATTEMPTS`` that never finished, the next
    batch is quarantined first (it is the one that did not fit: batches before it were
    published by earlier, finished compactions). The note need only outlive a kill, not
    a host crash: it is not synced (a pass over thousands of streams costs no fsync)."""
    try:
        logged = (stream_dir / "batches.log").stat().st_size
    except FileNotFoundError:
        logged = 0
    if logged <= max(mark.log_offset, len(batchlog.MAGIC)) and mark.pending is None:
        return False  # no batch to convert: nothing that could kill us
    if mark.attempt_after == mark.last_seq and mark.attempts >= MAX_ATTEMPTS:
        # The cursor is at last_seq: its next batch is the suspect. Reading its seq only
        # parses it, which ingest bounded (--max-message-bytes).
        suspect = cursor.peek_seq(mark.last_seq, mark.pending)
        if suspect is not None:
            _quarantine(
                stream_dir, mark, suspect, suspect,
                f"{mark.attempts} compactions begun here never finished (out of memory?)",
            )  # fmt: skip
    if mark.attempt_after != mark.last_seq:
        mark.attempt_after, mark.attempts = mark.last_seq, 0
    mark.attempts += 1
    write_watermark(stream_dir, mark, durable=False)
    return True


def _clear_attempts(stream_dir: Path) -> None:
    mark = read_watermark(stream_dir)
    if mark is not None and mark.attempts:
        mark.attempt_after, mark.attempts = -1, 0
        write_watermark(stream_dir, mark, durable=False)


def _quarantine(stream_dir: Path, mark: Watermark, first: int, last: int, why: str) -> None:
    """Leave batches ``first..last`` out of the lake for good, and say so once."""
    log.error(
        "stream %s: batches %d-%d quarantined, left out of the lake (%s); they stay in "
        "batches.log",
        stream_dir, first, last, why,
    )  # fmt: skip
    mark.quarantined.append({"first": first, "last": last, "reason": why})
    mark.last_seq, mark.pending = max(mark.last_seq, last), None
    mark.attempt_after, mark.attempts = -1, 0
    # The offset is found again by the next cursor (it reads past last_seq).
    mark.log_offset = 0
    write_watermark(stream_dir, mark)


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
