"""Trace files into records: ``read_trace`` for any format, ``load_trace`` for JSON ones.

JSON traces (TF timeline, Kineto, our Chrome export) may be gzipped; gzip is told by
its magic bytes, not the file name. The binary formats (Perfetto ``.pftrace``,
StepStats ``.pb``/``.pbtxt``) are told by suffix, then by content, and need packages
that ``tfprof.core`` does not depend on (imported only when such a file is read).
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from decimal import Decimal
from typing import Any

from tfprof.core.errors import TraceFormatError
from tfprof.readers.events import load_events, stream_events
from tfprof.readers.jsonstream import EventChunks
from tfprof.readers.perfetto import PERFETTO_SUFFIXES, read_perfetto
from tfprof.readers.stepstats import STEPSTATS_SUFFIXES, read_stepstats
from tfprof.readers.trace import NotStreamable, RecordedTrace

_GZIP_MAGIC = b"\x1f\x8b"
_HEAD_BYTES = 4096  # enough to skip the leading whitespace of a JSON trace
_PERFETTO_PACKET_TAG = b"\x0a"  # field 1, length-delimited: a Trace's first packet


def read_trace(path: str | os.PathLike[str]) -> RecordedTrace:
    """Import ``path`` whatever its format.

    Raises ``TraceFormatError`` naming what is wrong, ``FormatUnavailable`` when the
    format's package is not installed, ``OSError`` when the file cannot be read at all.
    """
    where = os.fspath(path)
    if os.path.isdir(where):
        raise TraceFormatError(f"{where}: a directory, not a trace file")
    with open(where, "rb") as f:
        head = f.read(64)
    name = where.lower()
    if name.endswith(PERFETTO_SUFFIXES):
        return read_perfetto(where)
    if name.endswith(STEPSTATS_SUFFIXES):
        return read_stepstats(where)
    if head[:2] == _GZIP_MAGIC or head.lstrip()[:1] in (b"{", b"["):
        return load_trace(where)
    if head[:1] == _PERFETTO_PACKET_TAG:
        return read_perfetto(where)
    raise TraceFormatError(
        f"{where}: not a trace tfprof can import (Chrome/TF timeline/Kineto JSON, "
        ".pftrace, RunMetadata/StepStats .pb/.pbtxt)"
    )


def looks_like_json_trace(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` starts like a JSON trace, gzipped or not, reading only its start.

    Cheap for big files (the launcher asks before the job starts); what the rest holds is
    ``load_trace``'s to judge. ``TraceFormatError`` when the gzip stream is corrupt,
    ``OSError`` when the file cannot be read.
    """
    where = os.fspath(path)
    with open(where, "rb") as f:
        head = f.read(_HEAD_BYTES)
    if head[:2] == _GZIP_MAGIC:
        try:
            with gzip.open(where, "rb") as f:
                head = f.read(_HEAD_BYTES)
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
            raise TraceFormatError(f"{where}: corrupt gzip data ({exc})") from None
    return head.lstrip()[:1] in (b"{", b"[")


def load_trace(path: str | os.PathLike[str]) -> RecordedTrace:
    """Import a TF timeline, Kineto or tfprof Chrome trace (optionally gzipped).

    Raises ``TraceFormatError`` for content we cannot import, ``OSError`` when the file
    cannot be read at all.
    """
    where = os.fspath(path)
    try:
        chunks = EventChunks(where)
        return stream_events(where, chunks, chunks.meta)
    except NotStreamable:
        pass  # read whole, the standard library's way
    events, meta = read_json_trace(where)
    return load_events(where, events, meta)


def json_trace_head(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The top-level keys a JSON trace writes before its events (our exports write their
    ``otherData`` there), read from the file's start; None when that cannot be told
    without reading it all."""
    try:
        return EventChunks(path).head()
    except NotStreamable:
        return None


def read_json_trace(path: str | os.PathLike[str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The events and the top-level object (``{}`` for Chrome's bare-array form) of a JSON
    trace, gzipped or not. ``TraceFormatError`` for anything else, ``OSError`` when the
    file cannot be read."""
    where = os.fspath(path)
    with open(where, "rb") as f:
        raw = f.read()
    if raw[:2] == _GZIP_MAGIC:
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceFormatError(f"{where}: corrupt gzip data ({exc})") from None
    try:
        doc = json.loads(raw, parse_float=Decimal)
    except json.JSONDecodeError as exc:
        raise TraceFormatError(
            f"{where}: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from None
    except UnicodeDecodeError:
        raise TraceFormatError(f"{where}: not JSON (not UTF-8 text)") from None

    events: Any
    meta: dict[str, Any] = {}
    if isinstance(doc, dict):
        if "traceEvents" not in doc:
            raise TraceFormatError(f"{where}: JSON without a traceEvents list, not a Chrome trace")
        events, meta = doc["traceEvents"], doc
    else:
        events = doc  # Chrome's bare-array form
    if not isinstance(events, list):
        raise TraceFormatError(f"{where}: traceEvents is a {type(events).__name__}, not a list")
    if not events:
        raise TraceFormatError(f"{where}: traceEvents is empty")
    return [e for e in events if isinstance(e, dict)], meta
