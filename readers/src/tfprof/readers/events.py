"""Parsed Chrome trace events of any flavour we know into a ``RecordedTrace``.

The flavour is told by content: tfprof's own metadata or track names first, then
Kineto's GPU categories, then TensorFlow's GPU-tracer process names. The readers of
binary formats (Perfetto, StepStats) build such events and come through here too, so
every format shares one parser per meaning.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import repeat
from typing import Any

from tfprof.core.errors import TraceFormatError
from tfprof.readers import kineto, tf_timeline, tfprof_chrome
from tfprof.readers.trace import (
    FORMAT_KINETO,
    FORMAT_TF_TIMELINE,
    FORMAT_TFPROF,
    Event,
    NotStreamable,
    RecordedTrace,
)
from tfprof.readers.trace_builder import TraceBuilder


def load_events(
    where: str, events: list[Event], meta: dict[str, Any] | None = None
) -> RecordedTrace:
    """Import already-parsed Chrome trace events (``meta``: the top-level object).

    ``TraceFormatError`` when no GPU event is found.
    """
    meta = meta or {}
    builder = TraceBuilder(where)
    fmt = detect(meta, events)
    if fmt == FORMAT_TFPROF:
        tfprof_chrome.read_tfprof(events, builder)
    elif fmt == FORMAT_KINETO:
        kineto.read_kineto(meta, events, builder)
    elif fmt == FORMAT_TF_TIMELINE:
        tf_timeline.read_tf_timeline(events, builder)
    trace = _finish(builder, fmt)
    if fmt == FORMAT_TFPROF:
        trace.origin_ns += tfprof_chrome.origin_ns(meta)
    elif fmt == FORMAT_KINETO:
        trace.origin_ns += kineto.base_time_ns(meta)
    return trace


def stream_events(where: str, chunks: Iterable[list[Event]], meta: dict[str, Any]) -> RecordedTrace:
    """Import events that arrive a chunk at a time; ``meta`` fills up as they do (it holds
    the keys after the events once the last chunk is read).

    The flavour is guessed from the first chunks, read on by that flavour's reader, and
    checked once everything is read against what ``detect`` says of the whole file;
    ``NotStreamable`` when the guess was wrong (the caller then reads the file whole).
    Our own exports are not streamed: their reader wants every track named first.
    """
    builder = TraceBuilder(where)
    pending: list[Event] = []  # events read before a streaming reader is chosen
    named: list[Event] = []  # their metadata events, and whether any cat is Kineto's
    any_kineto = False
    fmt: str | None = None
    reader: kineto.KinetoReader | tf_timeline.TfTimelineReader | None = None
    count = 0
    for chunk in chunks:
        count += len(chunk)
        if isinstance(reader, tf_timeline.TfTimelineReader):
            reader.any_kineto = reader.any_kineto or _kineto_categories(chunk)[0]
        if reader is not None:
            reader.feed(chunk)
            continue
        pending.extend(chunk)
        named.extend(e for e in chunk if e.get("ph") == "M")
        gpu, host = _kineto_categories(chunk)
        any_kineto = any_kineto or gpu
        fmt = _detect(meta, named, any_kineto)
        if fmt is None and host:
            # Kineto writes the host side first: its GPU activity may come after most of
            # the file. Read on as Kineto; the end tells whether there was any.
            fmt = FORMAT_KINETO
        if fmt == FORMAT_KINETO:
            reader = kineto.KinetoReader(builder)
        elif fmt == FORMAT_TF_TIMELINE:
            reader = tf_timeline.TfTimelineReader(builder)
        if reader is not None:
            reader.feed(pending)
            pending = named = []
    if not count:
        raise NotStreamable("no events")  # the whole-file reader says so in its words
    if reader is None:  # every event is in pending
        return load_events(where, pending, meta)
    if isinstance(reader, kineto.KinetoReader):
        final = _detect(meta, reader.metadata, reader.any_gpu)
    else:
        final = _detect(meta, reader.metadata, reader.any_kineto)
    if final != fmt:
        raise NotStreamable(f"read as {fmt}, but the whole file is {final}")
    if isinstance(reader, kineto.KinetoReader):
        reader.finish(meta)
    else:
        reader.finish()
    trace = _finish(builder, fmt)
    if fmt == FORMAT_KINETO:
        trace.origin_ns += kineto.base_time_ns(meta)
    return trace


def _finish(builder: TraceBuilder, fmt: str | None) -> RecordedTrace:
    if not len(builder):
        what = f"{fmt} trace" if fmt else "trace"
        raise TraceFormatError(
            f"{builder.path}: {what} has no GPU events (no kernel, memcpy or memset on a GPU"
            " stream); there is nothing to replay or analyse"
        )
    return builder.finish(fmt or "")


def _kineto_categories(events: list[Event]) -> tuple[bool, bool]:
    """Whether any of these events has one of Kineto's GPU categories; one of its host ones."""
    try:
        raw = set(map(dict.get, events, repeat("cat")))
    except TypeError:  # an unhashable cat somewhere
        return kineto.is_kineto(events), False
    categories = {str(c).lower() for c in raw}
    return (
        any(kineto.is_gpu_category(c) for c in categories),
        not categories.isdisjoint(kineto.HOST_CATEGORIES),
    )


def detect(meta: dict[str, Any], events: list[Event]) -> str | None:
    """The flavour of these events (a ``FORMAT_*``), or None when none is recognised."""
    if tfprof_chrome.is_tfprof(meta, events):
        return FORMAT_TFPROF
    if kineto.is_kineto(events):
        return FORMAT_KINETO
    if tf_timeline.is_tf_timeline(events):
        return FORMAT_TF_TIMELINE
    return None


def _detect(meta: dict[str, Any], named: list[Event], any_kineto: bool) -> str | None:
    """``detect`` from the metadata events and whether any event's cat is Kineto's."""
    if tfprof_chrome.is_tfprof(meta, named):
        return FORMAT_TFPROF
    if any_kineto:
        return FORMAT_KINETO
    if tf_timeline.is_tf_timeline(named):
        return FORMAT_TF_TIMELINE
    return None
