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

Written a part (task) at a time, a track's nodes a chunk at a time: the binary form as
one ``step_stats`` field per device (protobuf merges the repeated occurrences of an
embedded message field, so they read as one ``StepStats``), each device's nodes
serialised in chunks and joined (a message's repeated field may come in pieces); the
text form as the text of each chunk. Only one device's serialised nodes are held.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
from google.protobuf import text_format

from tfprof.collector.export.chrome import BinaryOutput
from tfprof.collector.export.protowire import LEN, tag, varint
from tfprof.collector.timeline.build import PartedTimeline, SliceTrack, Timeline
from tfprof.collector.timeline.model import TimelinePart, parted
from tfprof.readers.stepstats import COLON_STANDIN
from tfprof.readers.tfprotos import step_stats

CHUNK_NODES = 1 << 14
_FIELD_1 = tag(1, LEN)  # RunMetadata.step_stats, StepStats.dev_stats


def escape(name: str) -> str:
    return name.replace(":", COLON_STANDIN)


class StepStatsReporter:
    """Renders a ``Timeline`` (or a ``PartedTimeline``, a part at a time) as a serialised
    ``RunMetadata`` (binary, or text with ``text``)."""

    format_name = "stepstats"

    def __init__(
        self,
        timeline: Timeline | PartedTimeline,
        text: bool = False,
        chunk_nodes: int = CHUNK_NODES,
    ) -> None:
        self.timeline = timeline
        self.text = text
        self.chunk_nodes = max(1, chunk_nodes)
        self._escaped: list[str] = []

    def render(self, outfile: BinaryOutput) -> None:
        timeline = parted(self.timeline)
        opened = False
        for part in timeline.parts():
            if self.text and part.slices and not opened:
                outfile.write(b"step_stats {\n")
                opened = True
            self._write_part(outfile, part, timeline.origin_ns)
            del part  # its records are released before the next part is read
        if opened:
            outfile.write(b"}\n")

    def _write_part(self, outfile: BinaryOutput, part: TimelinePart, origin: int) -> None:
        names = part.names
        self._escaped += [escape(n) for n in names[len(self._escaped) :]]
        for track in part.slices:
            if self.text:
                self._write_text(outfile, track, origin, names)
            else:
                self._write_binary(outfile, track, origin, names)

    def _devices(self, track: SliceTrack, origin: int, names: tuple[str, ...]) -> Iterator[Any]:
        """The track's ``DeviceStepStats`` in pieces: the device's name, then its nodes
        a chunk at a time."""
        config_pb2, _ = step_stats()
        head = config_pb2.RunMetadata().step_stats.dev_stats.add()
        head.device = track.name
        yield head
        for a in range(0, len(track), self.chunk_nodes):
            device = config_pb2.RunMetadata().step_stats.dev_stats.add()
            _add_nodes(device, track, slice(a, a + self.chunk_nodes), origin, names,
                       self._escaped)  # fmt: skip
            yield device

    def _write_binary(
        self, outfile: BinaryOutput, track: SliceTrack, origin: int, names: tuple[str, ...]
    ) -> None:
        pieces = [d.SerializeToString() for d in self._devices(track, origin, names)]
        size = sum(len(p) for p in pieces)
        dev_stats = _FIELD_1 + varint(size)
        outfile.write(_FIELD_1 + varint(len(dev_stats) + size) + dev_stats)
        for piece in pieces:
            outfile.write(piece)

    def _write_text(
        self, outfile: BinaryOutput, track: SliceTrack, origin: int, names: tuple[str, ...]
    ) -> None:
        outfile.write(b"  dev_stats {\n")
        for device in self._devices(track, origin, names):
            outfile.write(text_format.MessageToString(device, indent=4).encode())
        outfile.write(b"  }\n")


def _add_nodes(
    device: Any,
    track: SliceTrack,
    sel: slice,
    origin: int,
    names: tuple[str, ...],
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
