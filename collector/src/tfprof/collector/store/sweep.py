"""Removing streams that stored nothing: a hello costs a directory and three files, and
anyone who may stream can say hello thousands of times.

A stream directory is removed once it is older than the grace period, no call holds it
(this collector's writers, and the ``flock`` any collector holds), its log holds no
batch at all, and its goodbye, if any, reports nothing sent and nothing dropped: there
is nothing in it a reader could show or count. Its run's and job's folders go too when
that leaves them empty. Taken under the store's lock, as ``Store.delete_run`` is, so a
stream being opened again is never removed under it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

from google.protobuf.message import DecodeError

from tfprof.collector.store.files import is_streaming
from tfprof.core import batchlog
from tfprof.proto import collector_pb2 as pb

if TYPE_CHECKING:
    from tfprof.collector.store.datadir import Store

log = logging.getLogger("tfprof.collector.store")


def _holds_nothing(stream_dir: Path, cutoff: float) -> bool:
    try:
        if (stream_dir / "hello.pb").stat().st_mtime > cutoff:
            return False
        log_size = (stream_dir / "batches.log").stat().st_size
    except FileNotFoundError:
        return False  # not a stream directory (yet), or one being made
    if log_size > len(batchlog.MAGIC):
        return False
    try:
        bye = pb.Goodbye.FromString((stream_dir / "goodbye.pb").read_bytes())
    except FileNotFoundError:
        return True
    except (OSError, DecodeError):
        return False  # unreadable: left for a person to see
    return not (bye.records_sent or bye.dropped_queue or bye.dropped_tracer or bye.dropped_relay)


def sweep_empty(store: Store, grace_s: float, now: float | None = None) -> list[Path]:
    """Remove the streams of ``store`` that stored nothing and are older than
    ``grace_s``; the directories removed (one line says how many)."""
    cutoff = (time.time() if now is None else now) - grace_s
    removed: list[Path] = []
    jobs = store.jobs_dir
    if not jobs.is_dir():
        return removed
    for job_dir in sorted(p for p in jobs.iterdir() if p.is_dir()):
        for run_dir in sorted(p for p in job_dir.iterdir() if p.is_dir()):
            streams = [p for p in run_dir.iterdir() if p.is_dir()]
            candidates = [p for p in streams if _holds_nothing(p, cutoff)]
            if not candidates:
                continue
            with store.lock:
                for stream_dir in candidates:
                    if store.is_open(stream_dir) or is_streaming(stream_dir):
                        continue
                    shutil.rmtree(stream_dir, ignore_errors=True)
                    removed.append(stream_dir)
                for folder in (run_dir, job_dir):
                    with contextlib.suppress(OSError):
                        os.rmdir(folder)  # only when empty
    if removed:
        log.info(
            "removed %d stream(s) that stored nothing (older than %g s)", len(removed), grace_s
        )
        store.forget_size()
    return removed
