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
"""

from __future__ import annotations

from typing import Any

import numpy as np
from google.protobuf import text_format

from tfprof.collector.export.chrome import BinaryOutput
from tfprof.collector.merge import SliceTrack, Timeline
from tfprof.core.formats.stepstats import COLON_STANDIN
from tfprof.core.formats.tfprotos import step_stats


def escape(name: str) -> str:
    return name.replace(":", COLON_STANDIN)


class StepStatsReporter:
    """Renders a ``Timeline`` as a serialised ``RunMetadata`` (binary, or text with ``text``)."""

    format_name = "stepstats"

    def __init__(self, timeline: Timeline, text: bool = False) -> None:
        self.timeline = timeline
        self.text = text

    def run_metadata(self) -> Any:
        config_pb2, _ = step_stats()
        run_metadata = config_pb2.RunMetadata()
        names = self.timeline.names
        escaped = [escape(n) for n in names]
        for track in self.timeline.slices:
            device = run_metadata.step_stats.dev_stats.add()
            device.device = track.name
            _add_nodes(device, track, self.timeline.origin_ns, names, escaped)
        return run_metadata

    def render(self, outfile: BinaryOutput) -> None:
        run_metadata = self.run_metadata()
        if self.text:
            outfile.write(text_format.MessageToString(run_metadata).encode())
        else:
            outfile.write(run_metadata.SerializeToString())


def _add_nodes(
    device: Any, track: SliceTrack, origin: int, names: tuple[str, ...], escaped: list[str]
) -> None:
    start = track.start_ns + np.int64(origin)
    end = start + track.duration_ns
    start_us = start // 1000
    rel_us = (end // 1000 - start_us).tolist()
    ops = track.op_id if track.op_id is not None else np.full(len(track), -1)
    rows = zip(
        start.tolist(),
        track.duration_ns.tolist(),
        start_us.tolist(),
        rel_us,
        track.name_id.tolist(),
        ops.tolist(),
        track.lane.tolist(),
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
