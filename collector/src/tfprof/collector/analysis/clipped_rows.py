"""What the record set and the streamed host pass share: records clipped to the analysis
window, and one process's host rows as a selector sees them.

Its own module so that ``records`` (which builds the record set) and ``host_pass``
(which streams the host rows into it) both import it, and neither imports the other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tfprof.collector.timeline.prepare import TimeWindow


@dataclass(frozen=True)
class ProcessHost:
    """A batch of one process's host rows in the window, as ``RecordSet.host`` would
    hold them: ``columns`` are ``kind``, ``start``, ``end``, ``job``, ``process``,
    ``thread`` and ``name`` of ``HOST_COLUMNS`` (global job, process and names ids);
    ``names`` is the name table so far (every id in ``columns`` indexes it)."""

    columns: Mapping[str, np.ndarray]
    names: Sequence[str]


def clip_to_window(
    start: np.ndarray, end: np.ndarray, window: TimeWindow
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``[start, end)`` clipped to the window, and the share of each record kept (None: all)."""
    if window.is_open:
        return start, end, None
    whole = end - start
    if window.lo is not None:
        start, end = np.maximum(start, window.lo), np.maximum(end, window.lo)
    if window.hi is not None:
        end = np.minimum(end, window.hi)
    # A clipped copy keeps the share of its bytes that fits its clipped time, so rates
    # (bytes / time) stay the copy's own.
    cut = (end - start) < whole  # whole > 0 wherever this holds
    if not cut.any():
        return start, end, None
    return start, end, np.where(cut, (end - start) / np.maximum(whole, 1), 1.0)
