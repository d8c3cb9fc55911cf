"""NVTX ranges from CUPTI MARKER records: pairing the start and end of each range.

CUPTI reports an NVTX range as two ``ActivityMarker2`` records sharing one marker id:
the start (flag MARKER_START, with the name and domain, on the thread that pushed or
started it) and the end (flag MARKER_END, no name); an ``nvtxMark`` is one record with
MARKER_INSTANTANEOUS. The two halves of a range may arrive in different buffers, so the
open starts are kept here between buffers. A range is one MARKER row: the start's time,
thread, name and domain, its duration, and the marker id as ``external_id``.

An end whose start never came (its start was dropped) is counted, never guessed; ranges
still open when tracing stops are closed at that moment (``close``), since they did
last until then.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

# CUpti_ActivityFlag values. MARKER_END (1 << 2) is missing from cupti-python 13.4's
# ActivityFlag enum, so all three are spelled out from cupti_activity.h.
MARKER_INSTANTANEOUS = 1 << 0
MARKER_START = 1 << 1
MARKER_END = 1 << 2
# CUpti_ActivityObjectKind: markers on a host thread carry (process id, thread id).
OBJECT_THREAD = 2
# Bound on ranges open at once: a program that starts ranges and never ends them must
# not grow this without limit. Beyond it, the oldest open range is given up (counted).
MAX_OPEN = 1 << 16

# (start_ns, end_ns, thread, name id, domain id, marker id)
MarkerRow = tuple[int, int, int, int, int, int]
# How a record names its range and domain: C string pointers in the bulk path, str in
# the attribute path.
Text = TypeVar("Text")


class MarkerRanges:
    """Open NVTX ranges of one process, across buffers. Not thread-safe: the CUPTI
    source serialises buffer conversions."""

    def __init__(self, max_open: int = MAX_OPEN) -> None:
        # marker id -> (start_ns, thread, name id, domain id); insertion order = age
        self._open: dict[int, tuple[int, int, int, int]] = {}
        self._max_open = max_open
        self.unpaired = 0  # ends without a start and starts given up: counted as dropped

    def __len__(self) -> int:
        return len(self._open)

    def add(
        self,
        records: Iterable[tuple[int, int, int, int, Text, Text]],
        name_id: Callable[[Text], int],
        domain_id: Callable[[Text], int],
    ) -> list[MarkerRow]:
        """Feed ``(flags, timestamp, marker id, thread, name, domain)`` records in buffer
        order; the ranges and instants they complete. ``name_id`` and ``domain_id`` turn
        a record's name / domain into a string-table index."""
        out: list[MarkerRow] = []
        opened = self._open
        for flags, ts, marker, thread, name, domain in records:
            if flags & MARKER_END:
                start = opened.pop(marker, None)
                if start is None:
                    self.unpaired += 1
                    continue
                t0, th, nm, dm = start
                out.append((t0, max(ts, t0), th, nm, dm, marker))
            elif flags & MARKER_START:
                if len(opened) >= self._max_open:
                    del opened[next(iter(opened))]
                    self.unpaired += 1
                opened[marker] = (ts, thread, name_id(name), domain_id(domain))
            else:  # an instant (nvtxMark), or a sync-user marker: one point in time
                out.append((ts, ts, thread, name_id(name), domain_id(domain), marker))
        return out

    def close(self, now_ns: int) -> list[MarkerRow]:
        """Every range still open, ended at ``now_ns`` (when tracing stopped)."""
        out = [(t0, max(now_ns, t0), th, nm, dm, mk) for mk, (t0, th, nm, dm) in self._open.items()]
        self._open.clear()
        return out
