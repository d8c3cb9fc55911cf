"""Counter names: one spelling for a counter in every format, and back.

A task's counters are its host samples (``cpu_percent``, ``rss_bytes``, ``threads``,
``read_bytes``, ``write_bytes``: the launcher's psutil readings) and one device-memory
series per GPU (``gpu:N allocated_bytes``). Viewers name a Chrome JSON counter
``"<event name> <arg key>"`` (trace_processor's JSON importer) and draw one chart per
event name, stacking its keys (catapult), so each series is written as an event of its
own with its name split in two: ``cpu`` + ``percent``, ``gpu:0`` + ``allocated_bytes``.
The Perfetto export names the counter track with the two joined by a space, so both
formats show the same names. Readers take that back, and the older spelling too (the
series as both event name and key; the series as the Perfetto track's name).
"""

from __future__ import annotations

import re

HOST_SERIES = ("cpu_percent", "rss_bytes", "threads", "read_bytes", "write_bytes")
MEMORY_KEY = "allocated_bytes"
_MEMORY = re.compile(r"gpu:(\d+) " + MEMORY_KEY)
_HOST_PARTS = {
    "cpu_percent": ("cpu", "percent"),
    "rss_bytes": ("rss", "bytes"),
    "threads": ("threads", "count"),
    "read_bytes": ("read", "bytes"),
    "write_bytes": ("write", "bytes"),
}
_SERIES_OF_TITLE = {f"{name} {key}": series for series, (name, key) in _HOST_PARTS.items()}


def memory_counter(device: int) -> str:
    """The device-memory series of GPU ``device``."""
    return f"gpu:{device} {MEMORY_KEY}"


def counter_parts(series: str) -> tuple[str, str]:
    """The (event name, arg key) a series is written as in Chrome JSON."""
    parts = _HOST_PARTS.get(series)
    if parts is not None:
        return parts
    name, _, key = series.rpartition(" ")
    return (name, key) if name else (series, series)


def counter_title(series: str) -> str:
    """What viewers call the series' counter: ``"<event name> <arg key>"``."""
    return " ".join(counter_parts(series))


def series_of(name: str, key: str) -> str | None:
    """The series a Chrome counter event's (name, arg key) holds, None for a counter
    that is not ours."""
    if name == key:  # the older spelling
        return title_series(name) or (name if name in _HOST_PARTS else None)
    return title_series(f"{name} {key}")


def title_series(title: str) -> str | None:
    """The series a counter named ``title`` (``counter_title``, or the series itself as
    older exports named it) holds, None for a counter that is not ours."""
    if title in _HOST_PARTS:
        return title
    series = _SERIES_OF_TITLE.get(title)
    if series is None and _MEMORY.fullmatch(title):
        series = title
    return series


def memory_device(series: str) -> int | None:
    """The GPU of a device-memory series, None for any other series."""
    match = _MEMORY.fullmatch(series)
    return int(match.group(1)) if match else None
