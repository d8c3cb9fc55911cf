"""TensorFlow op intervals out of an XSpace from TensorFlow's own host tracer.

The ``/host:CPU`` plane holds one line per host thread (its id: TensorFlow's hash of the
thread, see ``tf_ops_threads``) and the TraceMe events recorded on it. Two of them are
ops:

- a graph op (inside ``tf.function``, Keras ``fit``, a v1 session) is an event whose
  metadata name is ``name_scope/node:Type`` and whose display name is ``Type``, on the
  executor thread that ran it: it becomes ``sequential/dense/MatMul:MatMul``, the name
  TF's timeline shows;
- an eager op is an ``EagerExecute`` event with stats ``eager_op`` (its type) and
  ``is_func`` 0, on the calling Python thread: it becomes the op type, ``MatMul``. Eager
  calls of a ``tf.function`` (``is_func`` 1) are left out: the graph ops inside it are
  there.

Everything else (executor bookkeeping, tf.data iterator events, allocator events) is
left out. Times: each event is at ``line.timestamp_ns + offset_ps / 1000`` after the
session's ``profile_start_time`` (a stat of the ``Task Environment`` plane, epoch
nanoseconds on the host realtime clock); a line stamped with an absolute time is taken
as it is. Works on any object shaped like ``xplane_pb2.XSpace``; imports nothing.
"""

from __future__ import annotations

from typing import Any, NamedTuple

HOST_PLANE = "/host:CPU"
TASK_ENVIRONMENT_PLANE = "Task Environment"
PROFILE_START = "profile_start_time"
EAGER_EXECUTE = "EagerExecute"
# A line timestamp above this (2001-09-09 in epoch ns) is absolute, not session-relative.
_ABSOLUTE_NS = 10**18


class OpEvents(NamedTuple):
    """Parallel lists, one entry per op interval."""

    names: list[str]
    lines: list[int]  # TensorFlow's thread id of the line (XLine.id)
    starts_ns: list[int]  # epoch ns, host realtime clock
    durations_ns: list[int]


def profile_start_ns(space: Any) -> int | None:
    """The session's start (epoch ns) as the XSpace records it, if it does."""
    for plane in space.planes:
        if plane.name != TASK_ENVIRONMENT_PLANE:
            continue
        for stat in plane.stats:
            meta = plane.stat_metadata.get(stat.metadata_id)
            if meta is not None and meta.name == PROFILE_START:
                value = _stat_value(plane, stat)
                return int(value) if isinstance(value, int) else None
    return None


def _stat_value(plane: Any, stat: Any) -> Any:
    kind = stat.WhichOneof("value")
    if kind is None:
        return None
    if kind == "ref_value":  # an interned string: the name of a stat metadata entry
        meta = plane.stat_metadata.get(stat.ref_value)
        return meta.name if meta is not None else None
    return getattr(stat, kind)


def _graph_op_names(plane: Any) -> dict[int, str]:
    """Event metadata id -> op name, for metadata entries that are graph ops."""
    names: dict[int, str] = {}
    for metadata_id, meta in plane.event_metadata.items():
        op_type, name = meta.display_name, meta.name
        if op_type and name.endswith(":" + op_type) and "::" not in name:
            names[metadata_id] = name
    return names


def _stat_ids(plane: Any, wanted: tuple[str, ...]) -> dict[str, int]:
    return {m.name: i for i, m in plane.stat_metadata.items() if m.name in wanted}


def _eager_op(plane: Any, event: Any, eager_op_id: int, is_func_id: int) -> str | None:
    op: str | None = None
    for stat in event.stats:
        if stat.metadata_id == eager_op_id:
            value = _stat_value(plane, stat)
            op = value if isinstance(value, str) else None
        elif stat.metadata_id == is_func_id:
            value = _stat_value(plane, stat)
            if value not in (0, "0", False, None):
                return None
    return op


def op_events(space: Any, fallback_start_ns: int) -> OpEvents:
    """The op intervals of ``space``; ``fallback_start_ns`` stands in for the session's
    start when the XSpace does not record it (older TensorFlow)."""
    origin = profile_start_ns(space) or fallback_start_ns
    out = OpEvents([], [], [], [])
    for plane in space.planes:
        if plane.name != HOST_PLANE:
            continue
        graph_ops = _graph_op_names(plane)
        eager_ids = {i for i, m in plane.event_metadata.items() if m.name == EAGER_EXECUTE}
        stat_ids = _stat_ids(plane, ("eager_op", "is_func"))
        eager_op_id, is_func_id = stat_ids.get("eager_op", -1), stat_ids.get("is_func", -1)
        for line in plane.lines:
            base_ns = line.timestamp_ns + (0 if line.timestamp_ns > _ABSOLUTE_NS else origin)
            for event in line.events:
                metadata_id = event.metadata_id
                name = graph_ops.get(metadata_id)
                if name is None:
                    if metadata_id not in eager_ids:
                        continue
                    name = _eager_op(plane, event, eager_op_id, is_func_id)
                    if name is None:
                        continue
                out.names.append(name)
                out.lines.append(line.id)
                out.starts_ns.append(base_ns + event.offset_ps // 1000)
                out.durations_ns.append(event.duration_ps // 1000)
    return out
