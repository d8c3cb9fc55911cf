"""Per-group statistics of one column, as ``nsys stats`` reports them: count, total, mean,
median, min, max, sample standard deviation, and a nearest-rank percentile.

Groups are dense ids (``intervals.group_keys``); one sort serves every group.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class GroupStats:
    count: np.ndarray
    total: np.ndarray
    mean: np.ndarray
    median: np.ndarray
    low: np.ndarray
    high: np.ndarray
    stddev: np.ndarray  # sample (n - 1); 0 for a group of one
    p95: np.ndarray  # nearest rank: the smallest value with at least 95% at or below it


def group_stats(inverse: np.ndarray, values: np.ndarray, groups: int) -> GroupStats:
    count = np.bincount(inverse, minlength=groups)
    total = np.bincount(inverse, weights=values, minlength=groups)
    if not groups:
        z = np.zeros(0)
        return GroupStats(count, total, z, z, z, z, z, z)
    order = np.lexsort((values, inverse))  # by group, then by value
    ranked = values[order].astype(np.float64)
    first = np.concatenate(([0], np.cumsum(count)[:-1]))
    last = first + np.maximum(count, 1) - 1
    median = (ranked[first + (count - 1) // 2] + ranked[first + count // 2]) / 2.0
    rank95 = np.ceil(0.95 * count).astype(np.int64) - 1
    p95 = ranked[first + np.maximum(rank95, 0)]
    mean = total / np.maximum(count, 1)
    squares = np.bincount(inverse, weights=(values - mean[inverse]) ** 2, minlength=groups)
    stddev = np.sqrt(squares / np.maximum(count - 1, 1))
    return GroupStats(count, total, mean, median, ranked[first], ranked[last], stddev, p95)
