"""Times and durations on the command line, one grammar for every command.

A TIME (``--since``, ``--until``, either end of ``--window``) is

- an offset from the first event: ``+5s``, ``250ms``, ``+1.5m`` (units ns, us, ms, s,
  m/min, h; with ``+`` the unit may be left out and means seconds); ``0`` is the first
  event itself;
- an absolute time on the collector clock: epoch seconds (``1712867402.25``, also
  ``@1712867402.25``), epoch nanoseconds (``@1712867402250000000ns``), or ISO-8601
  (``2024-04-11T20:30:02.25Z``; without a zone, local time, as ``jobs`` prints times).

``--window START:END`` takes two TIMEs, either may be empty (ISO-8601 is not accepted
there, its colons would be ambiguous: use ``--since``/``--until``).
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Sequence

from tfprof.collector.errors import InvalidArgument
from tfprof.collector.jobdata import JobData

UNIT_NS = {"ns": 1, "us": 10**3, "µs": 10**3, "ms": 10**6, "s": 10**9, "m": 60 * 10**9,
           "min": 60 * 10**9, "h": 3600 * 10**9}  # fmt: skip
_UNITS = "ns|us|µs|ms|s|min|m|h"
_OFFSET = re.compile(rf"^(\+)?(\d+(?:\.\d*)?|\.\d+)\s*({_UNITS})?$")
_DURATION = re.compile(rf"^([+-]?)(\d+(?:\.\d*)?|\.\d+)\s*({_UNITS})$")
_EPOCH_NS = re.compile(r"^@(\d+)\s*ns$")
_EPOCH_S = re.compile(r"^@?(\d+(?:\.\d+)?)$")

TIME_HELP = (
    "an offset from the first event (+5s, 250ms), epoch seconds (1712867402.25) or "
    "ISO-8601 (2024-04-11T20:30:02Z)"
)
WINDOW_HELP = (
    "keep START:END only, each an offset from the first event (2s:3.5s, 150ms:, :800us) "
    "or an absolute epoch time (@1712867402.25:@1712867403)"
)


def first_event_ns(jobs: Sequence[JobData]) -> int | None:
    """The earliest record start on the collector clock, over every stream."""
    firsts = [
        int(s.records["start_ns"].min()) + s.record_shift_ns
        for job in jobs
        for s in job.streams
        if s.num_records
    ]
    return min(firsts) if firsts else None


def _epoch_seconds(text: str) -> int:
    whole, _, frac = text.partition(".")
    return int(whole) * 10**9 + int((frac + "0" * 9)[:9])


def parse_time(text: str, first_ns: int | None, flag: str = "--since") -> int:
    """``text`` as collector-clock nanoseconds since the epoch."""
    value = text.strip()
    if value == "0":
        value = "+0"
    m = _OFFSET.match(value)
    if m and (m.group(1) or m.group(3)):
        if first_ns is None:
            raise InvalidArgument(f"{flag} {text!r}: no records to count from")
        return first_ns + round(float(m.group(2)) * UNIT_NS[m.group(3) or "s"])
    m = _EPOCH_NS.match(value)
    if m:
        return int(m.group(1))
    m = _EPOCH_S.match(value)
    if m:
        return _epoch_seconds(m.group(1))
    try:
        moment = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidArgument(f"{flag} {text!r}: not a time; use {TIME_HELP}") from None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # local time
    delta = moment - datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
    return (delta.days * 86400 + delta.seconds) * 10**9 + delta.microseconds * 1000


def parse_window(text: str, first_ns: int | None) -> tuple[int | None, int | None]:
    """``START:END`` as collector-clock ns; either end may be empty."""
    if text.count(":") != 1:
        raise InvalidArgument(f"--window {text!r}: expected START:END (either may be empty)")
    start, end = (part.strip() for part in text.split(":"))
    lo = parse_time(start, first_ns, "--window") if start else None
    hi = parse_time(end, first_ns, "--window") if end else None
    if lo is not None and hi is not None and lo >= hi:
        raise InvalidArgument(f"--window {text!r}: starts at or after its end")
    return lo, hi


def parse_duration(text: str, flag: str = "--shift") -> int:
    """``"+5s"`` / ``"-250ms"`` / ``"42ns"`` as signed nanoseconds."""
    m = _DURATION.match(text.strip())
    if m is None:
        raise InvalidArgument(
            f"{flag} {text!r}: not a duration; use a number with a unit (ns, us, ms, s, m, h),"
            " e.g. +5s or -250ms"
        )
    sign, amount, unit = m.groups()
    value = round(float(amount) * UNIT_NS[unit])
    return -value if sign == "-" else value
