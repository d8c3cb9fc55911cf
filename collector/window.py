"""``--window START:END``: which part of the timeline an export keeps.

Either end may be left out (``2s:``, ``:500ms``). An end is

- an offset from the first event, a number with a unit: ``1.5s``, ``250ms``, ``800us``,
  ``120ns`` (also ``m``, ``h``); a bare ``0`` is the first event;
- or an absolute time on the collector clock: ``@<epoch seconds>`` (``@1712867402.25``)
  or ``@<epoch ns>ns`` (``@1712867402250000000ns``).

Slices overlapping the window are kept whole; host samples inside it are kept.
"""

from __future__ import annotations

import re

from tfprof.collector.errors import InvalidArgument
from tfprof.collector.importer import UNIT_NS

_OFFSET = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)\s*(ns|us|µs|ms|s|m|min|h)$")
_EPOCH_S = re.compile(r"^@(\d+(?:\.\d+)?)$")
_EPOCH_NS = re.compile(r"^@(\d+)\s*ns$")
HELP = (
    "keep START:END only: offsets from the first event with a unit (2s:3.5s, 150ms:, "
    ":800us) or absolute epoch times (@1712867402.25:@1712867403, @<ns>ns)"
)


def _end(text: str, first_ns: int) -> int | None:
    value = text.strip()
    if not value:
        return None
    if value == "0":
        return first_ns
    m = _OFFSET.match(value)
    if m:
        return first_ns + round(float(m.group(1)) * UNIT_NS[m.group(2)])
    m = _EPOCH_NS.match(value)
    if m:
        return int(m.group(1))
    m = _EPOCH_S.match(value)
    if m:
        whole, _, frac = m.group(1).partition(".")
        return int(whole) * 10**9 + int((frac + "0" * 9)[:9])
    raise InvalidArgument(f"--window: {text!r} is neither an offset (2s, 150ms) nor @epoch")


def parse_window(text: str, first_ns: int | None) -> tuple[int | None, int | None]:
    """``START:END`` as collector-clock ns; offsets count from ``first_ns``."""
    if text.count(":") != 1:
        raise InvalidArgument(f"--window {text!r}: expected START:END (either may be empty)")
    start, end = text.split(":")
    lo, hi = _end(start, first_ns or 0), _end(end, first_ns or 0)
    if lo is not None and hi is not None and lo >= hi:
        raise InvalidArgument(f"--window {text!r}: starts at or after its end")
    return lo, hi
