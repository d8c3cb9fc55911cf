"""TensorFlow's ``RunMetadata`` / ``StepStats`` (``.pb`` binary, ``.pbtxt`` text).

What ``tf.compat.v1.RunMetadata`` held after a traced ``session.run``, so that
``tensorflow.python.client.timeline.Timeline(run_metadata.step_stats)`` (and any script
built on it) opens our merged timeline. One ``DeviceStepStats`` per pseudo-device,
named exactly as in the Chrome export (``/job:J/task:T/gpu:N/stream:M`` and
``/job:J/task:T/gpu:N/memcpy``): TF's own GPU tracer named them ``/gpu:N/stream:M`` and
``/gpu:N/memcpy`` (see the ikhlestov traces), and ``timeline.py`` recognises GPU-tracer
devices by ``/stream:`` and ``/memcpy`` in the name, so both forms load the same way;
the job/task prefix keeps several jobs apart. Copies are on their stream and on
``memcpy``, as TF wrote them.

Per slice a ``NodeExecStats``: times in absolute collector-clock nanoseconds
(``all_start_nanos``, ``all_end_rel_nanos``) and microseconds (``all_start_micros``,
``all_end_rel_micros``, what ``timeline.py`` reads). ``timeline.py`` shows a GPU op as
``node_name.split(":")``'s first two fields (name, op), so ``node_name`` is
``<name>:<name>`` with any ``:`` inside the name replaced by ``∶`` (U+2236, looks the
same): the kernel name, or ``MEMCPY<kind>`` / ``MEMSET`` as in the Chrome export;
``timeline_label`` keeps the exact name. StepStats has no place for launch parameters
or byte counts: those stay in the other formats.

A slice attributed to an op (``SliceTrack.op_id``: the framework op or NVTX range it
ran for) is ``<op>:<name>`` instead, as TF's GPU tracer put the op's node first:
``timeline.py`` then shows the slice as the kernel with ``args.name`` the op (its ``:``
written as ``∶``, e.g. ``dense/MatMul∶MatMul:volta_sgemm_128x64_nn``).

The timeline comes a time chunk at a time, each touching many devices, and a device's
``DeviceStepStats`` is written whole (its length first, in the binary form): so each
device's nodes are serialised (or, for the text form, formatted) into one temporary
file as their chunks come, and written out device by device at the end, copied from
that file. Memory holds a chunk and the index of the file's pieces.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from typing import IO, Any

import numpy as np
from google.protobuf import text_format

from tfprof.collector.export.output import SPOOL_BYTES, BinaryOutput, copy_spooled
from tfprof.collector.export.protowire import LEN, tag, varint
from tfprof.collector.timeline.model import SliceTrack, Timeline
from tfprof.readers.stepstats import COLON_STANDIN
from tfprof.readers.tfprotos import step_stats

CHUNK_NODES = 1 << 14
_FIELD_1 = tag(1, LEN)  # RunMetadata.step_stats, StepStats.dev_stats


def escape(name: str) -> str:
    return name.replace(":", COLON_STANDIN)


class StepStatsReporter:
    """Renders a ``Timeline``, a part at a time, as a serialised ``RunMetadata``
    (binary, or text with ``text``)."""

    format_name = "stepstats"

    def __init__(self, timeline: Timeline, text: bool = False,
                 chunk_nodes: int = CHUNK_NODES) -> None:  # fmt: skip
        self.timeline = timeline
        self.text = text
        self.chunk_nodes = max(1, chunk_nodes)
        self._escaped: list[str] = []

    def render(self, outfile: BinaryOutput) -> None:
        timeline = self.timeline
        tracks = timeline.layout.tracks
        pieces: list[list[tuple[int, int]]] = [[] for _ in tracks]
        with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as spool:
            for part in timeline.parts():
                names = part.names
                self._escaped += [escape(n) for n in names[len(self._escaped) :]]
                for track in part.slices:
                    for piece in self._nodes(track, timeline.origin_ns, names):
                        spool.seek(0, 2)
                        pieces[track.track].append((spool.tell(), len(piece)))
                        spool.write(piece)
                del part  # its records go before the next part is read
            if self.text and tracks:
                outfile.write(b"step_stats {\n")
            for place, mine in zip(tracks, pieces, strict=True):
                self._write_device(outfile, place.name, mine, spool)
            if self.text and tracks:
                outfile.write(b"}\n")

    def _nodes(self, track: SliceTrack, origin: int, names: Sequence[str]) -> list[bytes]:
        """The track's nodes, a chunk at a time: each a ``DeviceStepStats`` holding only
        nodes (serialised, or as text)."""
        config_pb2, _ = step_stats()
        out = []
        for a in range(0, len(track), self.chunk_nodes):
            device = config_pb2.RunMetadata().step_stats.dev_stats.add()
            _add_nodes(device, track, slice(a, a + self.chunk_nodes), origin, names,
                       self._escaped)  # fmt: skip
            if self.text:
                out.append(text_format.MessageToString(device, indent=4).encode())
            else:
                out.append(device.SerializeToString())
        return out

    def _write_device(self, outfile: BinaryOutput, name: str,
                      pieces: list[tuple[int, int]], spool: IO[bytes]) -> None:  # fmt: skip
        """One ``DeviceStepStats``: the device's name, then its nodes from the spool."""
        config_pb2, _ = step_stats()
        head = config_pb2.RunMetadata().step_stats.dev_stats.add()
        head.device = name
        if self.text:
            outfile.write(b"  dev_stats {\n")
            outfile.write(text_format.MessageToString(head, indent=4).encode())
        else:
            first = head.SerializeToString()
            size = len(first) + sum(n for _, n in pieces)
            dev_stats = _FIELD_1 + varint(size)
            outfile.write(_FIELD_1 + varint(len(dev_stats) + size) + dev_stats + first)
        for offset, n in pieces:
            copy_spooled(spool, outfile, offset, n)
        if self.text:
            outfile.write(b"  }\n")


def _add_nodes(
    device: Any,
    track: SliceTrack,
    sel: slice,
    origin: int,
    names: Sequence[str],
    escaped: list[str],
) -> None:
    start = track.start_ns[sel] + np.int64(origin)
    duration = track.duration_ns[sel]
    end = start + duration
    start_us = start // 1000
    rel_us = (end // 1000 - start_us).tolist()
    ops = track.op_id[sel] if track.op_id is not None else np.full(start.shape[0], -1)
    rows = zip(
        start.tolist(),
        duration.tolist(),
        start_us.tolist(),
        rel_us,
        track.name_id[sel].tolist(),
        ops.tolist(),
        track.lane[sel].tolist(),
        strict=True,
    )
    nodes = device.node_stats
    for s_ns, d_ns, s_us, d_us, name_id, op_id, lane in rows:
        label = escaped[name_id]
        nodes.add(
            node_name=f"{escaped[op_id] if op_id >= 0 else label}:{label}",
            timeline_label=names[name_id],
            all_start_micros=s_us,
            op_end_rel_micros=d_us,
            all_end_rel_micros=d_us,
            all_start_nanos=s_ns,
            op_end_rel_nanos=d_ns,
            all_end_rel_nanos=d_ns,
            thread_id=lane,
        )
