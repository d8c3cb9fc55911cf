"""Parsed Chrome trace events of any flavour we know into a ``RecordedTrace``.

The flavour is told by content: tfprof's own metadata or track names first, then
Kineto's GPU categories, then TensorFlow's GPU-tracer process names. The readers of
binary formats (Perfetto, StepStats) build such events and come through here too, so
every format shares one parser per meaning.
"""

from __future__ import annotations

from typing import Any

from tfprof.core.errors import TraceFormatError
from tfprof.core.formats import kineto, tf_timeline, tfprof_chrome
from tfprof.core.formats.trace import (
    FORMAT_KINETO,
    FORMAT_TF_TIMELINE,
    FORMAT_TFPROF,
    Event,
    RecordedTrace,
    TraceBuilder,
)


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
    if not len(builder):
        what = f"{fmt} trace" if fmt else "trace"
        raise TraceFormatError(
            f"{where}: {what} has no GPU events (no kernel, memcpy or memset on a GPU stream);"
            " there is nothing to replay or analyse"
        )
    trace = builder.finish(fmt or "")
    if fmt == FORMAT_TFPROF:
        trace.origin_ns += tfprof_chrome.origin_ns(meta)
    return trace


def detect(meta: dict[str, Any], events: list[Event]) -> str | None:
    """The flavour of these events (a ``FORMAT_*``), or None when none is recognised."""
    if tfprof_chrome.is_tfprof(meta, events):
        return FORMAT_TFPROF
    if kineto.is_kineto(events):
        return FORMAT_KINETO
    if tf_timeline.is_tf_timeline(events):
        return FORMAT_TF_TIMELINE
    return None
