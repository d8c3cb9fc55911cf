"""How the analyses and the advice round what they report."""

from __future__ import annotations

from typing import Any

import numpy as np

Number = float | int | np.integer[Any] | np.floating[Any]


def us(ns: Number) -> float:
    """Nanoseconds as microseconds, rounded to the nanosecond."""
    return round(float(ns) / 1000.0, 3)


def pct(part: Number, whole: Number) -> float:
    """``part`` as a percentage of ``whole``, to 2 places; 0 when ``whole`` is 0."""
    return round(100.0 * float(part) / float(whole), 2) if whole else 0.0
