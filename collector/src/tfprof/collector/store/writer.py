"""Appending one stream's batches to its directory, durably and without duplicates.

Durability: a batch is written, flushed and (with ``fsync``, the default) fdatasync'ed
before ``append`` returns, and the ack goes out only after that. fdatasync adds up
to a few milliseconds per batch on the disks we measured (``bench/design_choices.py --only
fdatasync --dir DATA_DIR``; bench/results/cpu-design-choices.txt), and is what makes
"acknowledged" survive a host crash, not just a collector crash; ``--fsync false`` turns
it off for scratch collectors.

A batch whose sequence number is already stored is ignored, so replays after reconnects
never duplicate records; one that jumps more than ``MAX_SEQ_STEP`` past the last stored
is refused (``OutOfRange``), so no batch can make the stream's later ones look like
duplicates. One ``StreamWriter`` per stream directory is shared by every call that opens
it with the stream's secret (a reconnect racing the old call's teardown: the old call is
told to end, ``holders``), its appends serialised by a lock; an ``flock`` on batches.log
keeps a second collector process out, and tells
``jobs`` and retention that a live collector has the stream open. A torn final entry
(crash mid-write) is ignored on load and cut off when the stream is reopened. Each
entry carries a checksum (``tfprof.core.batchlog``), so readers skip and report a
damaged entry instead of misreading everything after it.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from tfprof.collector.errors import Conflict, OutOfRange
from tfprof.collector.store import stream_secret
from tfprof.collector.store.files import (
    flock_within,
    fsync_dir,
    make_dirs,
    open_for_append,
    write_atomic,
)
from tfprof.collector.store.stream_counts import StreamSummary, read_log_state
from tfprof.core import batchlog
from tfprof.proto import collector_pb2 as pb

SUMMARY_EVERY_S = 5.0
LOCK_WAIT_S = 3.0
# How far one batch may move a stream's sequence past its last stored batch. An honest
# relay numbers only the batches it keeps (1, 2, 3 ...); gaps come only from spool
# entries lost to damage, never a thousand in a row.
MAX_SEQ_STEP = 1024


class StreamWriter:
    """Appends one stream's batches. Thread-safe: concurrent calls that reopen the same
    stream share one writer (see ``Store.open_stream``)."""

    def __init__(
        self,
        directory: Path,
        hello: pb.Hello,
        fsync: bool = True,
        release: Callable[[StreamWriter, object], None] | None = None,
        on_finish: Callable[[Path], None] | None = None,
        stop_root: Path | None = None,
    ) -> None:
        """``stop_root``: the folder below which missing folders are made (with the data
        dir's modes) and made durable; the data dir's ``jobs`` folder."""
        self.directory = directory
        self.fsync = fsync
        self._release = release
        self._on_finish = on_finish
        self._lock = threading.Lock()
        self.refs = 1
        # The calls sharing the writer, by key: each one's way to end its call when the
        # stream is resumed on a newer one (Store.open_stream).
        self.holders: dict[object, Callable[[], None]] = {}
        self.secret_digest = stream_secret.digest_of(hello)
        created = make_dirs(directory, stop_root or directory.parents[2])
        log_path = directory / "batches.log"
        self._log = open_for_append(log_path)
        if not flock_within(self._log.fileno(), LOCK_WAIT_S):
            self._log.close()
            raise Conflict(
                f"stream {directory.name} is held open by another collector on this data dir"
            )
        if stream_secret.stored_digest(directory) is None:
            # Not synced on its own: the hello's durable write below syncs the folder (a
            # digest a host crash took only lets the stream's own agent bind it again).
            write_atomic(directory / stream_secret.FILE, self.secret_digest.encode(), False)
        hello_path = directory / "hello.pb"
        if not hello_path.exists():
            stored = stream_secret.without_secret(hello).SerializeToString()
            write_atomic(hello_path, stored, durable=fsync)
        state = read_log_state(directory, holding_lock=True)
        self.summary: StreamSummary = state.summary
        if state.damage and state.damage[-1].reason == "torn tail":
            # A torn tail must not prefix the next entry; damage before it is kept for
            # readers to report.
            os.truncate(log_path, state.damage[-1].offset)
        # A new log gets checksummed entries, its header going out with the first one;
        # a log of an older release keeps its format.
        self._version = batchlog.V2
        self._header = log_path.stat().st_size == 0
        if not self._header and batchlog.file_version(log_path) == batchlog.V1:
            self._version = batchlog.V1
        if created and fsync:
            # Every directory entry on the way must be durable, down from jobs/, or a
            # host crash could take a first run's acknowledged batches with it.
            for d in (directory, directory.parent, directory.parent.parent, directory.parents[2]):
                fsync_dir(d)
        self._summary_written = time.monotonic()

    @property
    def last_seq(self) -> int:
        return self.summary.last_seq

    def append(self, batch: pb.Batch, span: tuple[int | None, int | None] | None = None) -> int:
        """Store the batch unless its sequence number is already stored.

        Returns the bytes written, 0 for a duplicate. ``span`` is the batch's raw
        (first start, last end) when the caller has computed it already."""
        data = batch.SerializeToString()
        with self._lock:
            if batch.seq <= self.summary.last_seq:
                return 0
            if batch.seq > self.summary.last_seq + MAX_SEQ_STEP:
                raise OutOfRange(
                    f"batch seq {batch.seq} after {self.summary.last_seq}: a jump of more "
                    f"than {MAX_SEQ_STEP}; nothing of it is stored"
                )
            written = 0
            if self._header:
                self._log.write(batchlog.MAGIC)
                written, self._header = len(batchlog.MAGIC), False
            written += batchlog.append(self._log, data, self._version)
            self._log.flush()
            if self.fsync:
                os.fdatasync(self._log.fileno())
            self.summary.add(batch, written, span)
            if time.monotonic() - self._summary_written > SUMMARY_EVERY_S:
                self._write_summary()
        return written

    def _write_summary(self) -> None:
        write_atomic(
            self.directory / "summary.json",
            json.dumps(asdict(self.summary)).encode(),
            durable=False,
        )
        self._summary_written = time.monotonic()

    def finish(self, goodbye: pb.Goodbye) -> None:
        with self._lock:
            self._log.flush()
            os.fsync(self._log.fileno())
            self._write_summary()
            write_atomic(self.directory / "goodbye.pb", goodbye.SerializeToString())
        if self._on_finish is not None:
            self._on_finish(self.directory)

    def close(self, holder: object = None) -> None:
        """Release this caller's share (``holder``: the key it opened with); the last
        one closes the file and its lock."""
        if self._release is not None:
            self._release(self, holder)
        else:
            self.close_file()

    def close_file(self) -> None:
        with self._lock:
            if self._log.closed:
                return
            try:  # a full disk must not leave the file (and its flock) open
                with contextlib.suppress(OSError):
                    self._log.flush()
                    self._write_summary()
            finally:
                self._log.close()
