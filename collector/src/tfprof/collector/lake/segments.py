"""Segment names, partitions, and each stream's compaction watermark.

A segment's name says who wrote it and what it holds, so many collectors publish into
one lake without coordinating and no index is shared: listing the lake is the index.

- ``<collector>~<stream>~<first seq>-<last seq>.parquet``: the records of batches
  ``first..last`` of one stream (record tables, ``host_samples``);
- ``<collector>~<stream>.parquet``: a per-stream table's row(s) (``streams``,
  ``goodbyes``, ``devices``), replaced whole when they change.

The watermark (``lake.json`` in the stream's directory of the data dir) says what of
the stream's log is published: batches up to ``last_seq``, and which per-stream tables
(with the ``log_state`` row as published).
Before publishing batches ``last_seq+1..B`` it records ``pending = B``, so a compaction
cut short by a crash is redone for exactly that range, under the same names, and every
record lands in exactly one segment.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tfprof.collector.lake.fs import SUFFIX
from tfprof.collector.store.files import WATERMARK, write_atomic

COLLECTOR_ID = "collector.id"
SEP = "~"
_RANGE = re.compile(r"^(?P<collector>[^~]+)~(?P<stream>[^~]+)(~(?P<first>\d+)-(?P<last>\d+))?$")


@dataclass(frozen=True)
class SegmentName:
    collector: str
    stream: str
    first_seq: int | None = None  # None: a per-stream file
    last_seq: int | None = None

    @property
    def file_name(self) -> str:
        base = f"{self.collector}{SEP}{self.stream}"
        if self.first_seq is None:
            return base + SUFFIX
        return f"{base}{SEP}{self.first_seq:012d}-{self.last_seq:012d}{SUFFIX}"

    @classmethod
    def parse(cls, file_name: str) -> SegmentName | None:
        if not file_name.endswith(SUFFIX):
            return None
        m = _RANGE.match(file_name[: -len(SUFFIX)])
        if m is None:
            return None
        if m["first"] is None:
            return cls(m["collector"], m["stream"])
        return cls(m["collector"], m["stream"], int(m["first"]), int(m["last"]))


def partition(table: str, job: str, run: str) -> str:
    """The hive partition directory of one job run's files of ``table``."""
    return f"{table}/job={job}/run={run}"


def parse_partition(path: str) -> tuple[str, str] | None:
    """(job, run) from a file path inside a table's directory."""
    job = run = None
    for part in path.split("/"):
        if part.startswith("job="):
            job = part[4:]
        elif part.startswith("run="):
            run = part[4:]
    return (job, run) if job is not None and run is not None else None


@dataclass
class Watermark:
    """What of one stream's log is published in the lake (see the module docstring)."""

    lake: str
    collector: str
    last_seq: int = 0
    log_offset: int = 0  # where the entry after ``last_seq`` starts in batches.log
    pending: int | None = None  # last seq of a range being published
    streams: bool = False  # the streams row is published
    goodbye: bool = False  # the goodbyes row is published
    devices: list[int] = field(default_factory=list)  # ordinals in the devices file
    # The log_state row published (LogNotes as JSON; {} none needed); None: not worked
    # out yet (a stream compacted by an older release).
    log_state: dict[str, Any] | None = None
    # Compactions begun after ``attempt_after`` (= last_seq then) that never finished: a
    # range that kills the collector every time (out of memory) is quarantined, not
    # retried into a crash loop (publish.py).
    attempt_after: int = -1
    attempts: int = 0
    # Batches left out of the lake for good ({first, last, batches, reason}); they stay
    # in batches.log.
    quarantined: list[dict[str, Any]] = field(default_factory=list)
    # The capture_windows rows published ([mode, capture ids, start, end] each); None: not
    # worked out yet (a stream compacted by an older release).
    capture_windows: list[list[Any]] | None = None


def read_watermark(stream_dir: Path) -> Watermark | None:
    try:
        raw = json.loads((stream_dir / WATERMARK).read_text())
        return Watermark(**raw)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError) as exc:
        # Written atomically, so only a hand edit or a bad disk gets here; redoing the
        # whole stream could duplicate records, so say so and leave it alone.
        raise ValueError(f"{stream_dir / WATERMARK} is unreadable: {exc}") from exc


def write_watermark(stream_dir: Path, mark: Watermark, durable: bool = True) -> None:
    """``durable`` False: for a note that must outlive the process (a kill), not the host."""
    write_atomic(stream_dir / WATERMARK, json.dumps(asdict(mark)).encode(), durable)


def collector_id(data_dir: Path) -> str:
    """This data dir's collector id (12 random hex digits), made on first use."""
    path = data_dir / COLLECTOR_ID
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    candidate = secrets.token_hex(6)
    tmp = data_dir / f".{COLLECTOR_ID}.{candidate}"
    tmp.write_text(candidate + "\n")
    try:
        os.link(tmp, path)  # whole or absent; two processes racing: the first one wins
    except FileExistsError:
        return path.read_text().strip()
    finally:
        tmp.unlink()
    return candidate
