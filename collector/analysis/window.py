"""--since / --until: absolute times (ISO-8601, epoch seconds) or offsets from the first
event ("+5s", "+250ms"), resolved to collector-clock nanoseconds."""

from __future__ import annotations

import datetime
import re
from collections.abc import Sequence

from tfprof.collector.analysis.errors import AnalysisError
from tfprof.collector.model import JobData

_RELATIVE = re.compile(r"^\+(\d+(?:\.\d*)?|\.\d+)\s*(ns|us|µs|ms|s|m|min|h)?$")
_UNIT_NS = {"ns": 1, "us": 10**3, "µs": 10**3, "ms": 10**6, "s": 10**9, "m": 60 * 10**9,
            "min": 60 * 10**9, "h": 3600 * 10**9}  # fmt: skip
_EPOCH = re.compile(r"^\d+(?:\.\d+)?$")


def first_event_ns(jobs: Sequence[JobData]) -> int | None:
    """The earliest record start on the collector clock, over every stream."""
    firsts = [
        int(s.records["start_ns"].min()) + s.record_shift_ns
        for job in jobs
        for s in job.streams
        if s.num_records
    ]
    return min(firsts) if firsts else None


def parse_time(text: str, first_ns: int | None, flag: str = "--since") -> int:
    """``text`` as nanoseconds: "+5s" after ``first_ns``, epoch seconds, or ISO-8601
    (a time without a zone is local time, as ``tfprof-collector jobs`` prints them)."""
    value = text.strip()
    rel = _RELATIVE.match(value)
    if rel:
        if first_ns is None:
            raise AnalysisError(f"{flag} {text!r}: no records to count from")
        amount = float(rel.group(1))
        return first_ns + round(amount * _UNIT_NS[rel.group(2) or "s"])
    if _EPOCH.match(value):
        whole, _, frac = value.partition(".")
        return int(whole) * 10**9 + int((frac + "0" * 9)[:9])
    try:
        moment = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise AnalysisError(
            f"{flag} {text!r}: not a time; use ISO-8601 (2024-04-11T20:30:02.5Z), "
            "epoch seconds (1712867402.5) or an offset from the first event (+5s, +250ms)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # local time
    delta = moment - datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
    return (delta.days * 86400 + delta.seconds) * 10**9 + delta.microseconds * 1000
