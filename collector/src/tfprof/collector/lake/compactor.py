"""The collector's background compactor: segments while streams run and when they end.

Ingest never waits for it: the store only tells it which streams were opened and which
finished (a queue put), and one thread does the reading and writing. A finished stream
is compacted at once; every open one each ``interval_s`` (0: only when they finish).
On start it catches up with the whole data dir (older releases' data, a crash), and on
stop it compacts what it was told about, so a clean shutdown leaves nothing behind. The
same thread removes streams that stored nothing (``sweep``, store/sweep.py), every
``sweep_every_s``.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path

from google.protobuf.message import DecodeError

from tfprof.collector.lake.convert import OutOfRange, StreamCursor
from tfprof.collector.lake.fs import Lake
from tfprof.collector.lake.publish import Compacted, compact_data_dir, compact_stream

log = logging.getLogger("tfprof.collector.lake")


class Compactor:
    def __init__(
        self,
        data_dir: Path,
        lake: Lake,
        collector: str,
        interval_s: float,
        sweep: Callable[[], list[Path]] | None = None,
        sweep_every_s: float = 60.0,
    ) -> None:
        self.data_dir = data_dir
        self._sweep = sweep
        self._sweep_every_s = sweep_every_s
        self.lake = lake
        self.collector = collector
        self.interval_s = interval_s
        self.published = Compacted()
        self._finished: queue.Queue[Path | None] = queue.Queue()
        self._open: set[Path] = set()
        # Where each open stream's log was read to, so a pass reads only what is new.
        self._cursors: dict[Path, StreamCursor] = {}
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="tfprof-compactor", daemon=True)

    # -- what the store tells us (never blocks) --------------------------------------

    def stream_opened(self, directory: Path) -> None:
        with self._lock:
            self._open.add(directory)

    def stream_finished(self, directory: Path) -> None:
        self._finished.put(directory)

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Compact everything pending, then end the thread."""
        self._finished.put(None)
        self._thread.join(timeout)

    def _run(self) -> None:
        total, failed = compact_data_dir(self.data_dir, self.lake, self.collector)
        self.published.add(total)
        if total.files or failed:
            log.info("compacted %d batches (%d records) of earlier streams into %s%s",
                     total.batches, total.records, self.lake.url,
                     f"; {len(failed)} stream(s) failed" if failed else "")  # fmt: skip
        next_pass = time.monotonic() + self.interval_s
        next_sweep = time.monotonic() + self._sweep_every_s
        while True:
            due = [next_pass] if self.interval_s > 0 else []
            if self._sweep is not None:
                due.append(next_sweep)
            timeout = max(0.0, min(due) - time.monotonic()) if due else None
            try:
                item = self._finished.get(timeout=timeout)
            except queue.Empty:
                item = Path()  # the interval is up
            if item is None:
                self._pass(everything=True)
                return
            if self._sweep is not None and time.monotonic() >= next_sweep:
                self._sweep_empty()
                next_sweep = time.monotonic() + self._sweep_every_s
            if item != Path():
                self._compact(item)
                with self._lock:
                    self._open.discard(item)
                self._cursors.pop(item, None)
            if self.interval_s > 0 and time.monotonic() >= next_pass:
                self._pass(everything=False)
                next_pass = time.monotonic() + self.interval_s

    def _pass(self, everything: bool) -> None:
        while everything:
            try:
                item = self._finished.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                self._compact(item)
        with self._lock:
            streams = sorted(self._open)
        for directory in streams:
            self._compact(directory)

    def _sweep_empty(self) -> None:
        assert self._sweep is not None
        try:
            removed = self._sweep()
        except Exception:  # housekeeping must never take the collector down
            log.exception("removing streams that stored nothing failed")
            return
        with self._lock:
            self._open.difference_update(removed)
        for directory in removed:
            self._cursors.pop(directory, None)

    def _compact(self, directory: Path) -> None:
        try:
            self.published.add(compact_stream(directory, self.lake, self.collector, self._cursors))
        except (OutOfRange, DecodeError, ValueError, OSError) as exc:
            # The log keeps every record; the next pass tries again.
            log.error("stream %s not compacted: %s", directory, exc)
            self._cursors.pop(directory, None)
        except Exception:  # housekeeping must never take the collector down
            log.exception("stream %s: compaction failed", directory)
            self._cursors.pop(directory, None)
