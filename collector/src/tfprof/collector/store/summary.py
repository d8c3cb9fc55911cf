"""A stream's counts and time range, cached in summary.json for a prefix of its log.

summary.json is a cache, never fsync'ed: it covers the first ``log_bytes`` of the log,
and readers parse only what was appended after it, so listing jobs stays cheap.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tfprof.core import batchlog
from tfprof.proto import collector_pb2 as pb


@dataclass
class StreamSummary:
    """What listing needs of a stream's log, for its first ``log_bytes`` bytes."""

    log_bytes: int = 0
    last_seq: int = 0
    batches: int = 0
    records: int = 0
    first_start_ns: int | None = None  # raw record times, before the clock shift
    last_end_ns: int | None = None
    dropped_queue: int = 0

    def add(self, batch: pb.Batch, entry_bytes: int) -> None:
        self.log_bytes += entry_bytes
        self.last_seq = max(self.last_seq, batch.seq)
        self.batches += 1
        self.dropped_queue = max(self.dropped_queue, batch.dropped)
        n = len(batch.records.kind)
        if not n:
            return
        self.records += n
        starts = batch.records.start_ns
        first = min(starts) if len(starts) else 0
        dur = batch.records.duration_ns
        if len(starts) and len(dur):
            last = int((np.array(starts, np.int64) + np.array(dur, np.int64)).max())
        else:
            last = max(starts) if len(starts) else (max(dur) if len(dur) else 0)
        self.widen(first, last)

    def widen(self, first: int | None, last: int | None) -> None:
        if first is not None:
            self.first_start_ns = (
                first if self.first_start_ns is None else min(self.first_start_ns, first)
            )
        if last is not None:
            self.last_end_ns = last if self.last_end_ns is None else max(self.last_end_ns, last)


def read_summary(directory: Path) -> StreamSummary:
    """The stream's summary, brought up to date with the log's tail (torn tail left out)."""
    log_path = directory / "batches.log"
    summary = StreamSummary()
    try:
        cached = json.loads((directory / "summary.json").read_text())
        candidate = StreamSummary(**cached)
        if 0 <= candidate.log_bytes <= log_path.stat().st_size:
            summary = candidate
    except (OSError, ValueError, TypeError):
        pass  # missing, torn or stale: rescan the whole log
    for raw in batchlog.read(log_path, summary.log_bytes):
        batch = pb.Batch.FromString(raw)
        if batch.seq <= summary.last_seq:
            summary.log_bytes += batchlog.LENGTH.size + len(raw)  # an old duplicate entry
            continue
        summary.add(batch, batchlog.LENGTH.size + len(raw))
    return summary
