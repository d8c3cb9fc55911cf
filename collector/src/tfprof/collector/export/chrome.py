"""Chrome trace event JSON: opens in Perfetto UI and chrome://tracing.

Object form, ``{"displayTimeUnit": "ns", "otherData": {...}, "traceEvents": [...]}``:
``ts`` and ``dur`` are microseconds (fractional, nanosecond precision) relative to the
earliest event, as the format requires; ``displayTimeUnit`` only asks viewers to show
nanoseconds. The timeline's metadata goes under ``otherData``, the format's place for it
(chrome://tracing lists it under "Metadata", Perfetto ignores it).

Events are built a chunk at a time from numpy columns (one ``tolist()`` per column, a
list comprehension per kind) and serialised with orjson, so memory stays bounded; a
million slices take about two seconds, a tenth of what tf.timeline needs (bench/).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import numpy as np
import orjson

from tfprof.collector.merge import CounterTrack, SliceTrack, Timeline
from tfprof.collector.model import COPY_KIND_NAMES, MEMORY_KIND_NAMES, SYNC_TYPE_NAMES
from tfprof.core.records import RecordKind

CHUNK_EVENTS = 1 << 13  # small enough to stay in cache, large enough to amortise numpy


class BinaryOutput(Protocol):
    """Where a reporter writes: an open binary file, a GzipFile, a BytesIO."""

    def write(self, data: bytes | memoryview, /) -> Any: ...


_PEER_COPY = 10  # CUPTI_ACTIVITY_MEMCPY_KIND_PTOP
# Record columns each kind's events read (besides times, kind and name).
_COMMON_COLUMNS = ("correlation", "device", "stream", "context")
_KERNEL_COLUMNS = (
    *_COMMON_COLUMNS,
    *("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"),
    *("registers", "static_smem", "dynamic_smem"),
)
_COPY_COLUMNS = (*_COMMON_COLUMNS, "bytes", "copy_kind", "src_kind", "dst_kind", "dst_device")
_MEMSET_COLUMNS = (*_COMMON_COLUMNS, "bytes", "src_kind")
_SYNC_COLUMNS = (*_COMMON_COLUMNS, "sync_type")


def _label_table(names: dict[int, str], fallback: str) -> np.ndarray:
    table = np.array([names.get(i, fallback) for i in range(max(names) + 2)], dtype=object)
    table[-1] = fallback  # where out-of-range values land
    return table


_COPY_KINDS = _label_table(COPY_KIND_NAMES, "Unknown")
_MEMORY_KINDS = _label_table(MEMORY_KIND_NAMES, "unknown")
_SYNC_TYPES = _label_table(SYNC_TYPE_NAMES, "Unknown")


def _labels(table: np.ndarray, values: np.ndarray) -> list[str]:
    last = table.shape[0] - 1
    result: list[str] = table[np.where((values >= 0) & (values < last), values, last)].tolist()
    return result


def _dims(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> list[str]:
    """``"(x, y, z)"`` per row; formatted once per distinct triple, not once per row."""
    if x.shape[0] == 0:
        return []
    small = (x.min() >= 0) & (x.max() < 1 << 31) & (y.min() >= 0) & (y.max() < 1 << 16)
    if small and z.min() >= 0 and z.max() < 1 << 16:
        key = (x << 32) | (y << 16) | z
        uniq, inverse = np.unique(key, return_inverse=True)
        text = [f"({k >> 32}, {(k >> 16) & 0xFFFF}, {k & 0xFFFF})" for k in uniq.tolist()]
    else:
        triples, inverse = np.unique(np.stack([x, y, z], axis=1), axis=0, return_inverse=True)
        text = [f"({a}, {b}, {c})" for a, b, c in triples.tolist()]
    result: list[str] = np.array(text, dtype=object)[inverse.reshape(-1)].tolist()
    return result


@contextmanager
def _gc_paused() -> Iterator[None]:
    # Millions of short-lived event dicts would set off full collections that walk every
    # live object again and again (a fifth of the export time); nothing built here forms
    # cycles, so collection waits until the trace is written.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class ChromeReporter:
    """Renders a ``Timeline`` as Chrome trace event JSON."""

    format_name = "chrome"

    def __init__(self, timeline: Timeline, chunk_events: int = CHUNK_EVENTS) -> None:
        self.timeline = timeline
        self.chunk_events = max(1, chunk_events)
        self._names = np.array(timeline.names, dtype=object)

    def render(self, outfile: BinaryOutput) -> None:
        """Write the whole trace to a binary file object."""
        outfile.write(b'{"displayTimeUnit":"ns","otherData":')
        outfile.write(orjson.dumps(self.timeline.metadata))
        outfile.write(b',"traceEvents":[')
        first = True
        with _gc_paused():
            for chunk in self._chunks():
                if not chunk:
                    continue
                data = orjson.dumps(chunk)
                if not first:
                    outfile.write(b",")
                outfile.write(memoryview(data)[1:-1])  # the items without the list's brackets
                first = False
        outfile.write(b"]}\n")

    def _chunks(self) -> Iterator[list[dict[str, Any]]]:
        yield self._metadata_events()
        for track in self.timeline.slices:
            yield from self._slice_events(track)
        for counter in self.timeline.counters:
            yield from self._counter_events(counter)

    def _metadata_events(self) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        for proc in self.timeline.processes:
            events.append(
                {"ph": "M", "name": "process_name", "pid": proc.pid, "args": {"name": proc.name}}
            )
            events.append(
                {
                    "ph": "M",
                    "name": "process_sort_index",
                    "pid": proc.pid,
                    "args": {"sort_index": proc.sort_index},
                }
            )
        for track in self.timeline.slices:
            for tid, name in zip(track.thread_ids, track.thread_names, strict=True):
                events.append(
                    {
                        "ph": "M",
                        "name": "thread_name",
                        "pid": track.pid,
                        "tid": tid,
                        "args": {"name": name},
                    }
                )
                events.append(
                    {
                        "ph": "M",
                        "name": "thread_sort_index",
                        "pid": track.pid,
                        "tid": tid,
                        "args": {"sort_index": tid},
                    }
                )
        return events

    def _slice_events(self, track: SliceTrack) -> Iterator[list[dict[str, Any]]]:
        kind = track.kind
        tids = np.asarray(track.thread_ids, dtype=np.int64)[track.lane]
        known = np.zeros(kind.shape[0], dtype=bool)
        for value, build, needed in (
            (RecordKind.KERNEL, self._kernels, _KERNEL_COLUMNS),
            (RecordKind.MEMCPY, self._copies, _COPY_COLUMNS),
            (RecordKind.MEMSET, self._memsets, _MEMSET_COLUMNS),
            (RecordKind.SYNC, self._syncs, _SYNC_COLUMNS),
        ):
            mask = kind == value
            known |= mask
            yield from self._in_chunks(track, tids, mask, build, needed)
        # Records of a kind this version does not know: shown plainly, never dropped.
        yield from self._in_chunks(track, tids, ~known, self._others, _COMMON_COLUMNS)

    def _in_chunks(
        self,
        track: SliceTrack,
        tids: np.ndarray,
        mask: np.ndarray,
        build: Any,
        needed: tuple[str, ...],
    ) -> Iterator[list[dict[str, Any]]]:
        every = bool(mask.all())  # e.g. a stream of kernels only: slices, not gathers
        count = mask.shape[0] if every else int(np.count_nonzero(mask))
        picked = None if every else np.flatnonzero(mask)
        for a in range(0, count, self.chunk_events):
            b = min(a + self.chunk_events, count)
            sel: slice | np.ndarray = slice(a, b) if picked is None else picked[a:b]
            cols = {c: track.column(c, sel) for c in needed}
            cols["name_id"] = track.name_id[sel]
            cols["start_ns"] = track.start_ns[sel]
            cols["duration_ns"] = track.duration_ns[sel]
            cols["kind"] = track.kind[sel]
            yield build(track.pid, tids[sel].tolist(), cols)

    def _common(self, cols: dict[str, np.ndarray]) -> tuple[list[Any], ...]:
        return (
            self._names[cols["name_id"]].tolist(),
            (cols["start_ns"] / 1000.0).tolist(),
            (cols["duration_ns"] / 1000.0).tolist(),
            cols["correlation"].tolist(),
            cols["device"].tolist(),
            cols["stream"].tolist(),
            cols["context"].tolist(),
        )

    def _kernels(
        self, pid: int, tids: list[int], cols: dict[str, np.ndarray]
    ) -> list[dict[str, Any]]:
        names, ts, dur, corr, dev, stream, ctx = self._common(cols)
        grid = _dims(cols["grid_x"], cols["grid_y"], cols["grid_z"])
        block = _dims(cols["block_x"], cols["block_y"], cols["block_z"])
        regs = cols["registers"].tolist()
        static = cols["static_smem"].tolist()
        dynamic = cols["dynamic_smem"].tolist()
        return [
            {
                "ph": "X",
                "cat": "kernel",
                "name": n,
                "pid": pid,
                "tid": t,
                "ts": s,
                "dur": d,
                "args": {
                    "grid": g,
                    "block": b,
                    "registers per thread": r,
                    "static shared memory": ss,
                    "dynamic shared memory": ds,
                    "correlation": c,
                    "device": dv,
                    "stream": st,
                    "context": cx,
                },
            }
            for n, t, s, d, g, b, r, ss, ds, c, dv, st, cx in zip(
                names,
                tids,
                ts,
                dur,
                grid,
                block,
                regs,
                static,
                dynamic,
                corr,
                dev,
                stream,
                ctx,
                strict=True,
            )
        ]

    def _copies(
        self, pid: int, tids: list[int], cols: dict[str, np.ndarray]
    ) -> list[dict[str, Any]]:
        names, ts, dur, corr, dev, stream, ctx = self._common(cols)
        nbytes = cols["bytes"]
        duration = cols["duration_ns"]
        # bytes per nanosecond is GB/s; a zero-length copy has no rate (NaN -> null).
        with np.errstate(divide="ignore", invalid="ignore"):
            rate = np.where(duration > 0, np.round(nbytes / duration, 3), np.nan).tolist()
        kinds = _labels(_COPY_KINDS, cols["copy_kind"])
        src = _labels(_MEMORY_KINDS, cols["src_kind"])
        dst = _labels(_MEMORY_KINDS, cols["dst_kind"])
        events = [
            {
                "ph": "X",
                "cat": "memcpy",
                "name": n,
                "pid": pid,
                "tid": t,
                "ts": s,
                "dur": d,
                "args": {
                    "bytes": nb,
                    "kind": k,
                    "src kind": sk,
                    "dst kind": dk,
                    "GB/s": gbs,
                    "correlation": c,
                    "device": dv,
                    "stream": st,
                    "context": cx,
                },
            }
            for n, t, s, d, nb, k, sk, dk, gbs, c, dv, st, cx in zip(
                names,
                tids,
                ts,
                dur,
                nbytes.tolist(),
                kinds,
                src,
                dst,
                rate,
                corr,
                dev,
                stream,
                ctx,
                strict=True,
            )
        ]
        peers = np.flatnonzero(cols["copy_kind"] == _PEER_COPY)
        for i, dst_device in zip(peers.tolist(), cols["dst_device"][peers].tolist(), strict=True):
            events[i]["args"]["dst device"] = dst_device
        return events

    def _memsets(
        self, pid: int, tids: list[int], cols: dict[str, np.ndarray]
    ) -> list[dict[str, Any]]:
        names, ts, dur, corr, dev, stream, ctx = self._common(cols)
        kinds = _labels(_MEMORY_KINDS, cols["src_kind"])
        return [
            {
                "ph": "X",
                "cat": "memset",
                "name": n,
                "pid": pid,
                "tid": t,
                "ts": s,
                "dur": d,
                "args": {
                    "bytes": nb,
                    "memory kind": k,
                    "correlation": c,
                    "device": dv,
                    "stream": st,
                    "context": cx,
                },
            }
            for n, t, s, d, nb, k, c, dv, st, cx in zip(
                names,
                tids,
                ts,
                dur,
                cols["bytes"].tolist(),
                kinds,
                corr,
                dev,
                stream,
                ctx,
                strict=True,
            )
        ]

    def _syncs(
        self, pid: int, tids: list[int], cols: dict[str, np.ndarray]
    ) -> list[dict[str, Any]]:
        # On the stream waited for; a context-wide sync on stream SYNC_NO_STREAM's track.
        names, ts, dur, corr, dev, stream, ctx = self._common(cols)
        return [
            {
                "ph": "X",
                "cat": "sync",
                "name": n,
                "pid": pid,
                "tid": t,
                "ts": s,
                "dur": d,
                "args": {
                    "sync type": k,
                    "correlation": c,
                    "device": dv,
                    "stream": st,
                    "context": cx,
                },
            }
            for n, t, s, d, k, c, dv, st, cx in zip(
                names,
                tids,
                ts,
                dur,
                _labels(_SYNC_TYPES, cols["sync_type"]),
                corr,
                dev,
                stream,
                ctx,
                strict=True,
            )
        ]

    def _others(
        self, pid: int, tids: list[int], cols: dict[str, np.ndarray]
    ) -> list[dict[str, Any]]:
        names, ts, dur, corr, dev, stream, ctx = self._common(cols)
        return [
            {
                "ph": "X",
                "cat": "activity",
                "name": n,
                "pid": pid,
                "tid": t,
                "ts": s,
                "dur": d,
                "args": {"kind": k, "correlation": c, "device": dv, "stream": st, "context": cx},
            }
            for n, t, s, d, k, c, dv, st, cx in zip(
                names,
                tids,
                ts,
                dur,
                cols["kind"].tolist(),
                corr,
                dev,
                stream,
                ctx,
                strict=True,
            )
        ]

    def _counter_events(self, counter: CounterTrack) -> Iterator[list[dict[str, Any]]]:
        name, pid, tid = counter.name, counter.pid, counter.tid
        for a in range(0, counter.time_ns.shape[0], self.chunk_events):
            b = a + self.chunk_events
            yield [
                {"ph": "C", "name": name, "pid": pid, "tid": tid, "ts": s, "args": {name: v}}
                for s, v in zip(
                    (counter.time_ns[a:b] / 1000.0).tolist(),
                    counter.values[a:b].tolist(),
                    strict=True,
                )
            ]
