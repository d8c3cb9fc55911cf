"""One stored batch's figures per GPU: busy time, kernels, copies and copied bytes.

Busy time is GPU busy time as every analysis defines it: the union of the kernels',
copies' and memsets' intervals on the GPU (``GpuUnion``: exact across batches while
each CUDA stream runs its work in order, as CUDA streams do). ``stream_busy`` is the
earlier figure, the union of kernel intervals per CUDA stream summed over streams (it
may pass 1 per second when streams run kernels at the same time). Record times are
durations on one host's clock, so no clock mapping is needed.

Cost per batch is a few numpy passes over its columns, every CUDA stream at once
(bench/live_metrics.py, bench/results/cpu-live-metrics.txt); Python loops run per stream
or GPU, never per record.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from tfprof.collector.read.carried_unions import islands
from tfprof.core.cupti_labels import COPY_KINDS
from tfprof.proto import collector_pb2 as pb

_INT64_MIN = np.iinfo(np.int64).min

StreamKey = tuple[int, int]  # (device ordinal, CUDA stream) inside one process


@dataclass
class GpuFigures:
    """What one job did on one GPU, since the collector started (or the job came back)."""

    busy_ns: int = 0  # union of kernels, copies, memsets on the GPU
    kernels: int = 0
    copies: dict[str, int] = field(default_factory=dict)  # direction -> count
    copy_bytes: dict[str, int] = field(default_factory=dict)
    stream_busy_ns: int = 0  # union of kernels per CUDA stream, summed

    def add(self, other: GpuFigures) -> None:
        self.busy_ns += other.busy_ns
        self.stream_busy_ns += other.stream_busy_ns
        self.kernels += other.kernels
        for direction, n in other.copies.items():
            self.copies[direction] = self.copies.get(direction, 0) + n
        for direction, n in other.copy_bytes.items():
            self.copy_bytes[direction] = self.copy_bytes.get(direction, 0) + n


def union_busy_ns(
    device: np.ndarray,
    stream: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    covered: dict[StreamKey, int],
) -> dict[int, int]:
    """Nanoseconds per device covered by the union of ``[start, end)`` per (device,
    stream), beyond what ``covered`` (end of what each stream counted so far) holds;
    ``covered`` is moved forward."""
    if not len(start):
        return {}
    stream_keys, group = _group_streams(device, stream)
    base = int(start.min())
    span = int(end.max()) - base + 2  # times relative to base, and -1, fit in [0, span)
    if len(stream_keys) * span >= 1 << 62:  # absurd spans: one group at a time, no lifts
        return _union_per_group(device, stream, start, end, covered)
    rel_start, rel_end = start - base, end - base
    if bool((rel_start[1:] >= rel_start[:-1]).all()):  # the usual batch: in time order
        order = np.argsort(group.astype(np.uint16 if len(stream_keys) < 1 << 16 else np.int64),
                           kind="stable")  # fmt: skip
    else:
        order = np.argsort(group * span + rel_start)  # by stream, then start
    g, s, e = group[order], rel_start[order], rel_end[order]
    counted = np.array(
        [max(-1, min(span - 2, covered.get(k, _INT64_MIN) - base)) for k in stream_keys]
    )
    # Intervals sorted by start: each adds what it reaches past every earlier one of its
    # stream. One running maximum serves every stream: each stream's values are lifted
    # above all of the streams before it.
    lift = g * span + 1
    reach = np.maximum(np.maximum.accumulate(e + lift) - lift, counted[g])
    first = np.flatnonzero(np.concatenate(([True], g[1:] != g[:-1])))
    before = np.concatenate(([0], reach[:-1]))
    before[first] = counted[g[first]]
    added = np.clip(e - np.maximum(s, before), 0, None)
    per_stream = np.add.reduceat(added, first)
    last = np.append(first[1:] - 1, len(g) - 1)
    busy: dict[int, int] = {}
    for key, ns, reached in zip(
        stream_keys, per_stream.tolist(), reach[last].tolist(), strict=True
    ):
        busy[key[0]] = busy.get(key[0], 0) + ns
        covered[key] = max(covered.get(key, _INT64_MIN), base + reached)
    return busy


def _group_streams(device: np.ndarray, stream: np.ndarray) -> tuple[list[StreamKey], np.ndarray]:
    """The distinct (device, stream) pairs (or (device, copy kind)), and each record's index
    among them."""
    width = int(stream.max()) + 1
    if (int(device.max()) + 1) * width <= 1 << 16:  # small ids, as CUDA hands them out
        pair = device * width + stream
        present = np.flatnonzero(np.bincount(pair))
        lookup = np.zeros(int(present[-1]) + 1, np.int64)
        lookup[present] = np.arange(len(present))
        return [(p // width, p % width) for p in present.tolist()], lookup[pair]
    pairs = (device.astype(np.uint64) << np.uint64(32)) | stream.astype(np.uint64)
    keys, group = np.unique(pairs, return_inverse=True)
    return [(k >> 32, k & 0xFFFFFFFF) for k in keys.tolist()], group.ravel()


def _union_per_group(
    device: np.ndarray,
    stream: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    covered: dict[StreamKey, int],
) -> dict[int, int]:
    """``union_busy_ns`` with a loop over the streams, for spans too long to lift."""
    busy: dict[int, int] = {}
    order = np.lexsort((start, stream, device))
    device, stream, start, end = device[order], stream[order], start[order], end[order]
    edges = np.flatnonzero((np.diff(device) != 0) | (np.diff(stream) != 0)) + 1
    bounds = [0, *edges.tolist(), len(start)]
    for lo, hi in itertools.pairwise(bounds):
        key = (int(device[lo]), int(stream[lo]))
        ends = end[lo:hi]
        counted = covered.get(key, _INT64_MIN)
        reach = np.maximum(np.maximum.accumulate(ends), counted)
        before = np.concatenate(([counted], reach[:-1]))
        added = np.clip(ends - np.maximum(start[lo:hi], before), 0, None)
        busy[key[0]] = busy.get(key[0], 0) + int(added.sum())
        covered[key] = int(reach[-1])
    return busy


def _column(records: pb.Records, name: str, n: int) -> np.ndarray:
    values = getattr(records, name)
    return np.array(values, dtype=np.int64) if len(values) else np.zeros(n, np.int64)


class GpuUnion:
    """The union of one GPU's kernel, copy and memset intervals, fed a batch at a time
    in completion order; what each batch adds to it.

    A CUDA stream runs its work in order, so no later record of a stream starts before
    what that stream has ended: islands that end before every active stream's end are
    settled and dropped (counted already). Streams silent for ``HORIZON_NS`` past the
    latest end do not hold islands back."""

    HORIZON_NS = 10 * 10**9

    def __init__(self) -> None:
        self.start = np.zeros(0, dtype=np.int64)  # unsettled islands, sorted
        self.end = np.zeros(0, dtype=np.int64)
        self.stream_end: dict[int, int] = {}

    def add(self, stream: np.ndarray, start: np.ndarray, end: np.ndarray) -> int:
        """Busy ns the batch's intervals add to the union."""
        before = int((self.end - self.start).sum())
        s = np.concatenate([self.start, start])
        e = np.concatenate([self.end, np.maximum(end, start)])
        order = np.argsort(s, kind="stable")
        _, self.start, self.end = islands(np.zeros(s.shape[0], np.int64), s[order], e[order])
        added = int((self.end - self.start).sum()) - before
        for k, last in zip(*_stream_ends(stream, end), strict=True):
            self.stream_end[k] = max(self.stream_end.get(k, last), last)
        latest = max(self.stream_end.values())
        active = [t for t in self.stream_end.values() if t >= latest - self.HORIZON_NS]
        settled = self.end <= min(active)
        self.start, self.end = self.start[~settled], self.end[~settled]
        return added


def _stream_ends(stream: np.ndarray, end: np.ndarray) -> tuple[list[int], list[int]]:
    keys, inverse = np.unique(stream, return_inverse=True)
    last = np.full(keys.shape[0], np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(last, inverse.reshape(-1), end)
    return keys.tolist(), last.tolist()


def batch_figures(
    records: pb.Records, covered: dict[StreamKey, int], unions: dict[int, GpuUnion] | None = None
) -> dict[int, GpuFigures]:
    """Kernel and copy figures of one batch's records per device ordinal; ``unions``:
    each device's GPU union so far (busy time), ``covered``: each CUDA stream's kernel
    union's end so far (stream busy time)."""
    n = len(records.kind)
    out: dict[int, GpuFigures] = {}
    if not n:
        return out
    kind = np.array(records.kind, dtype=np.int64)
    device = _column(records, "device", n)
    unions = {} if unions is None else unions
    busy = np.flatnonzero((kind == pb.KERNEL) | (kind == pb.MEMCPY) | (kind == pb.MEMSET))
    if len(busy):
        start = _column(records, "start_ns", n)[busy]
        end = start + _column(records, "duration_ns", n)[busy]
        b_device, b_stream = device[busy], _column(records, "stream", n)[busy]
        for ordinal in np.unique(b_device).tolist():
            mine = b_device == ordinal
            union = unions.setdefault(ordinal, GpuUnion())
            added = union.add(b_stream[mine], start[mine], end[mine])
            out.setdefault(ordinal, GpuFigures()).busy_ns += added
    kernels = np.flatnonzero(kind == pb.KERNEL)
    if len(kernels):
        start = _column(records, "start_ns", n)[kernels]
        end = start + _column(records, "duration_ns", n)[kernels]
        k_device = device[kernels]
        k_stream = _column(records, "stream", n)[kernels]
        for ordinal, ns in union_busy_ns(k_device, k_stream, start, end, covered).items():
            out.setdefault(ordinal, GpuFigures()).stream_busy_ns += ns
        ordinals, counts = np.unique(k_device, return_counts=True)
        for ordinal, count in zip(ordinals.tolist(), counts.tolist(), strict=True):
            out.setdefault(ordinal, GpuFigures()).kernels += count
    copies = np.flatnonzero(kind == pb.MEMCPY)
    if len(copies):
        pairs, group = _group_streams(device[copies], _column(records, "copy_kind", n)[copies])
        counts = np.bincount(group, minlength=len(pairs))
        nbytes = np.bincount(
            group, weights=_column(records, "bytes", n)[copies], minlength=len(pairs)
        )
        for (ordinal, copy_kind), count, size in zip(
            pairs, counts.tolist(), nbytes.tolist(), strict=True
        ):
            gpu = out.setdefault(ordinal, GpuFigures())
            direction = COPY_KINDS.label(copy_kind)
            gpu.copies[direction] = gpu.copies.get(direction, 0) + count
            gpu.copy_bytes[direction] = gpu.copy_bytes.get(direction, 0) + int(size)
    return out
