"""A stream's counts and time range, cached in summary.json for a prefix of its log.

summary.json is a cache, never fsync'ed: it covers the first ``log_bytes`` of the log,
and readers parse only what was appended after it, so listing jobs stays cheap. It
also remembers how many records the damaged part of a log held (``read_log_state``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tfprof.collector.store.files import is_streaming
from tfprof.core import batchlog
from tfprof.proto import collector_pb2 as pb

# GPU records: kernels (1), copies, memsets, syncs (4) (``RecordKind``).
GPU_KIND_MIN, GPU_KIND_MAX = pb.KERNEL, pb.SYNC


@dataclass
class StreamSummary:
    """What listing needs of a stream's log, for its first ``log_bytes`` bytes."""

    log_bytes: int = 0
    last_seq: int = 0
    batches: int = 0
    records: int = 0  # every record (GPU activity and the host side)
    gpu_records: int = 0  # kernels, copies, memsets, syncs
    first_start_ns: int | None = None  # raw record times, before the clock shift
    last_end_ns: int | None = None
    dropped_queue: int = 0
    lost_records: int = 0  # in entries found damaged since (not in ``records``)
    # Capture edges the hook reported: [on, at_ns (host clock), the clock offset that
    # batch carried (None: the hello's)], so listing knows the windows (store/traced_windows.py).
    edges: list[list[Any]] = field(default_factory=list)
    clock_offset_ns: int | None = None  # the latest Batch.clock_offset_ns

    def add(
        self, batch: pb.Batch, entry_bytes: int, span: tuple[int | None, int | None] | None = None
    ) -> None:
        """Count one stored batch; ``span``: its raw (first start, last end) when the
        caller computed it already."""
        self.log_bytes += entry_bytes
        self.last_seq = max(self.last_seq, batch.seq)
        self.batches += 1
        self.dropped_queue = max(self.dropped_queue, batch.dropped)
        if batch.clock_updated:
            self.clock_offset_ns = batch.clock_offset_ns
        for edge in batch.capture_edges:
            self.edges.append([bool(edge.on), int(edge.at_ns), self.clock_offset_ns])
        n = len(batch.records.kind)
        if not n:
            return
        self.records += n
        kind = np.array(batch.records.kind, np.int64)
        self.gpu_records += int(np.count_nonzero((kind >= GPU_KIND_MIN) & (kind <= GPU_KIND_MAX)))
        if span is not None:
            self.widen(*span)
            return
        starts = batch.records.start_ns
        first = min(starts) if len(starts) else 0
        dur = batch.records.duration_ns
        if len(starts) and len(dur):
            last = int((np.array(starts, np.int64) + np.array(dur, np.int64)).max())
        else:
            last = max(starts) if len(starts) else (max(dur) if len(dur) else 0)
        self.widen(first, last)

    def collector_edges(self, hello_offset_ns: int) -> list[tuple[bool, int]]:
        """The capture edges on the collector clock (as compaction shifts them)."""
        return [(on, at + (hello_offset_ns if off is None else off)) for on, at, off in self.edges]

    def widen(self, first: int | None, last: int | None) -> None:
        if first is not None:
            self.first_start_ns = (
                first if self.first_start_ns is None else min(self.first_start_ns, first)
            )
        if last is not None:
            self.last_end_ns = last if self.last_end_ns is None else max(self.last_end_ns, last)


@dataclass
class LogState:
    """A stream's summary (readable records only) and what of its log is damaged."""

    summary: StreamSummary
    damage: list[batchlog.Damage] = field(default_factory=list)
    # Records in damaged entries; None when some were never counted (unknown).
    lost_records: int | None = 0


def read_summary(directory: Path) -> StreamSummary:
    """The stream's summary of its readable records (see ``read_log_state``)."""
    return read_log_state(directory).summary


def _cached(directory: Path, log_size: int) -> StreamSummary | None:
    try:
        fields = json.loads((directory / "summary.json").read_text())
        if "gpu_records" not in fields or "edges" not in fields:
            return None  # written before GPU records and capture edges were kept
        candidate = StreamSummary(**fields)
    except (OSError, ValueError, TypeError):
        return None  # missing, torn or stale: rescan the whole log
    return candidate if 0 <= candidate.log_bytes <= log_size else None


def read_log_state(directory: Path, holding_lock: bool = False) -> LogState:
    """The stream's summary, brought up to date with the log's tail.

    Every entry's checksum is verified (cheap next to parsing); only the entries past
    the cached summary are parsed. Damage inside the cached prefix makes it a full
    rescan, and the records the cache counted there but no longer reads are ``lost``.
    A torn tail is left out while a live collector holds the stream (an entry being
    written), unless ``holding_lock``: the caller is that collector, reopening the
    stream, so the torn tail is a crash's.
    """
    data = batchlog.read_bytes(directory / "batches.log")
    cached = _cached(directory, len(data))
    scan = batchlog.Scan(batchlog.V2, 0)
    good = list(batchlog.entries(data, 0, scan))
    covered = cached.log_bytes if cached is not None else 0
    rescan = cached is None or any(d.offset < covered for d in scan.damage)
    summary = StreamSummary() if rescan or cached is None else cached
    readable_in_cache = 0
    for offset, raw in good:
        if offset < covered and not rescan:
            continue
        batch = pb.Batch.FromString(raw)
        if offset < covered:
            readable_in_cache += len(batch.records.kind)
        if batch.seq > summary.last_seq:  # else an old duplicate entry
            summary.add(batch, 0)
    summary.log_bytes = scan.end
    torn = scan.damage and scan.damage[-1].reason == "torn tail"
    if torn and not holding_lock and is_streaming(directory):
        scan.damage.pop()  # an entry being written right now, not damage
    if rescan and cached is not None:
        written = cached.records + cached.lost_records
        summary.lost_records = max(0, written - readable_in_cache)
    state = LogState(summary, scan.damage, summary.lost_records)
    if any(d.offset + d.nbytes > covered and d.reason != "torn tail" for d in scan.damage):
        state.lost_records = None  # damage the cache never counted: records unknown
    return state
