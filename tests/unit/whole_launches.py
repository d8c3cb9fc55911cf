"""The tests' oracle for the read engine's host pieces (``read.host_launches``): per
process, on its unclipped records and with the timeline's own whole-process rules
(launch flows, ``timeline.flows``; op attribution, ``timeline.attribution``),
``launches`` finds for every GPU record the API call that launched it, the op it ran
for, its launch latency and the depth of its stream's queue when it was launched
(``queue_depth``: HTA's queue length less the record itself).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tests.unit.whole_intervals import group_keys
from tfprof.collector.timeline.attribution import attribute_ops
from tfprof.collector.timeline.flows import is_launched, link_launches
from tfprof.core.records import RecordKind


@dataclass(frozen=True)
class Launches:
    """Per GPU record of one process, in row order: what launched it, what it ran for."""

    op: np.ndarray  # names id of the host range it is attributed to; -1: none
    api: np.ndarray  # row (of the process's rows) of the API call that launched it; -1: none
    latency: np.ndarray  # ns from that call's end to the record's start, negatives as 0
    queue: np.ndarray  # its stream's launched-not-started records when its call began; -1


def launches(records: Mapping[str, np.ndarray], names: Sequence[str], ops: bool = True) -> Launches:
    """Link and attribute the GPU records among one process's rows.

    ``records`` holds the columns ``attribute_ops`` reads plus ``device`` and ``stream``;
    ``name`` and MARKER ``category`` are ids into ``names``. Without ``ops`` only the
    launching calls and latencies are found (``op`` and ``queue`` are all -1): what the
    advice rules read, at a fraction of the cost.
    """
    if ops:
        attribution = attribute_ops(records, names)
        gpu, links = attribution.gpu, attribution.links
    else:
        gpu = np.flatnonzero(is_launched(records["kind"]))
        links = link_launches(records["kind"], records["correlation"])
    n = int(gpu.shape[0])
    op = np.full(n, -1, dtype=np.int64)
    if ops:
        hit = attribution.marker >= 0
        op[hit] = records["name"][attribution.marker[hit]]

    start = records["start_ns"]
    end = start + np.maximum(records["duration_ns"], 0)
    slot = np.searchsorted(gpu, links.gpu)
    api = np.full(n, -1, dtype=np.int64)
    api[slot] = links.api
    latency = np.zeros(n, dtype=np.int64)
    # As HTA's launch statistics: a kernel's start before its call's end (clock noise) is 0.
    latency[slot] = np.maximum(start[links.gpu] - end[links.api], 0)
    queue = np.full(n, -1, dtype=np.int64)
    if not ops:
        return Launches(op, api, latency, queue)
    work = records["kind"][links.gpu] != RecordKind.SYNC
    queue[slot[work]] = queue_depth(
        records["device"][links.gpu[work]],
        records["stream"][links.gpu[work]],
        start[links.api[work]],
        start[links.gpu[work]],
    )
    return Launches(op, api, latency, queue)


def queue_depth(
    device: np.ndarray, stream: np.ndarray, launched: np.ndarray, started: np.ndarray
) -> np.ndarray:
    """Per launched record: how many records of its (device, stream) were launched before
    it and had not started when its launch call began (HTA's queue length, less itself).

    A stream runs its work in launch order, so "launched before and not yet started" is
    "launched before" less "started by then"; the count never goes below zero.
    """
    depth = np.zeros(launched.shape[0], dtype=np.int64)
    if not launched.shape[0]:
        return depth
    inverse, _ = group_keys(device, stream)
    order = np.argsort(inverse, kind="stable")
    bounds = np.flatnonzero(np.diff(inverse[order])) + 1
    for idx in np.split(order, bounds):
        a, s = launched[idx], started[idx]
        before = np.searchsorted(np.sort(a), a, side="left")
        begun = np.searchsorted(np.sort(s), a, side="right")
        depth[idx] = np.maximum(before - begun, 0)
    return depth
