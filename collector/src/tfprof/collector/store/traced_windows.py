"""The windows of time a stream was traced in: its ``capture_windows`` rows.

A hook that follows windows (``on-demand``, ``periodic:ON/EVERY``) reports each time it
turns capturing on and off (``Batch.capture_edges``, on the host's realtime clock, put on
the collector's as host samples are): its windows are those edges paired, an open one
ending at the stream's last record so far. Each window names the on-demand captures the
collector sent the stream that overlap it (``captures.jsonl``). A stream traced
throughout (``always``, or an agent that predates the field) has one window, its span
(first record start to last record end): analyses read such a stream as captured
throughout, whatever its span says.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tfprof.collector.store.capture_log import CaptureLog
from tfprof.proto import collector_pb2 as pb

if TYPE_CHECKING:
    from tfprof.collector.store.stream_counts import StreamSummary

ALWAYS = "always"
Row = tuple[str, str, int, int]  # mode, capture ids, start, end (collector clock)


def follows_windows(mode: str) -> bool:
    """Whether a stream of this capture mode traced only inside windows."""
    return mode not in ("", ALWAYS)


def window_rows(
    mode: str,
    edges: Sequence[tuple[bool, int]],
    span: tuple[int, int] | None,
    captures: Sequence[tuple[str, int, int]] = (),
) -> list[Row]:
    """The stream's windows: ``edges`` (on, at) in the order the hook applied them,
    ``span`` (first start, last end) of its records so far, ``captures`` (id, start,
    end) the collector sent it."""
    if not follows_windows(mode):
        return [(ALWAYS, "", span[0], span[1])] if span is not None else []
    rows: list[Row] = []
    opened: int | None = None
    last = span[1] if span is not None else None
    for on, at in edges:
        if on and opened is None:
            opened = at
        elif not on and opened is not None:
            rows.append((mode, "", opened, max(opened, at)))
            opened = None
    if opened is not None:  # still capturing
        rows.append((mode, "", opened, max(opened, last if last is not None else opened)))
    return [
        (m, ",".join(c for c, a, b in captures if a < end and b > start), start, end)
        for m, _, start, end in rows
    ]


def captures_of(data_dir: Path, hello: pb.Hello) -> list[tuple[str, int, int]]:
    """(capture id, start, end) of each capture the collector sent the stream: captures
    name a stream by its process (job, run, host, pid, task), never by its stream id."""
    me = (hello.job, hello.run_id, hello.host, hello.pid, hello.task)
    found = []
    for capture in CaptureLog(data_dir).read():
        reached = any((s.job, s.run_id, s.host, s.pid, s.task) == me for s in capture.streams)
        if reached:
            found.append(
                (capture.capture_id, capture.start_ns, capture.start_ns + capture.duration_ns)
            )
    return found


def edge_of(edge: pb.CaptureEdge, shift_ns: int) -> tuple[bool, int]:
    """One reported edge on the collector's clock (``shift_ns``: the stream's host
    shift at that batch)."""
    return bool(edge.on), int(edge.at_ns) + shift_ns


def stream_windows(
    stream_dir: Path,
    hello: pb.Hello,
    edges: Sequence[tuple[bool, int]],
    record_shift: int,
    summary: StreamSummary | None = None,
) -> list[Row]:
    """The windows of the stream stored in ``stream_dir`` (``<data dir>/jobs/<job>/
    <run>/<stream id>``; ``hello`` its hello): ``edges`` on the collector clock, its span
    from its summary (read when not given)."""
    from tfprof.collector.store.stream_counts import read_summary

    summary = read_summary(stream_dir) if summary is None else summary
    span = None
    if summary.first_start_ns is not None and summary.last_end_ns is not None:
        span = (summary.first_start_ns + record_shift, summary.last_end_ns + record_shift)
    captures: list[tuple[str, int, int]] = []
    if follows_windows(hello.capture_mode):
        captures = captures_of(stream_dir.parent.parent.parent.parent, hello)
    return window_rows(hello.capture_mode, edges, span, captures)


def union_ns(windows: Sequence[tuple[int, int]]) -> int:
    """The length of the union of ``windows`` (captured time)."""
    total, reach = 0, None
    for a, b in sorted(windows):
        if reach is None or a > reach:
            total += b - a
            reach = b
        elif b > reach:
            total += b - reach
            reach = b
    return total
