"""Chrome ``"X"`` events of one record kind, built from whole columns: the export's hot loop.

Which args an event carries comes from ``tfprof.core.slice_args``; the function that
turns columns into event dicts is compiled from that table once per kind, as
``dataclasses`` and ``namedtuple`` compile theirs: a dict display with the arg names
written in is twice as fast per row as ``dict(zip(names, row))`` (measured on a million
rows), and this loop runs once per slice. The generated code only names the table's
args, whose names are inserted as ``repr`` literals.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

import numpy as np

from tfprof.collector.export.args import arg_columns, is_sparse
from tfprof.collector.timeline import SliceTrack
from tfprof.core.slice_args import args_of, category_of

Event = dict[str, Any]
# (category, pid, [names, tids, ts, dur, *one list per dense arg]) -> events
_RowBuilder = Callable[[str, int, Sequence[list[Any]]], list[Event]]


def _compile(arg_names: tuple[str, ...]) -> _RowBuilder:
    values = [f"a{i}" for i in range(len(arg_names))]
    args = ", ".join(f"{name!r}: {value}" for name, value in zip(arg_names, values, strict=True))
    source = (
        "def build(cat, pid, columns):\n"
        "    return [\n"
        '        {"ph": "X", "cat": cat, "name": n, "pid": pid, "tid": t, "ts": s, "dur": d,\n'
        f'         "args": {{{args}}}}}\n'
        f"        for n, t, s, d, {''.join(v + ', ' for v in values)}"
        "in zip(*columns, strict=True)\n"
        "    ]\n"
    )
    namespace: dict[str, Any] = {}
    exec(compile(source, f"<chrome events: {', '.join(arg_names)}>", "exec"), namespace)
    builder: _RowBuilder = namespace["build"]
    return builder


@cache
def _builder(kind: int | None) -> _RowBuilder:
    args = args_of(kind)
    dense = tuple(a.name for a in args if not is_sparse(a))
    # A sparse arg is added to the events that have it after they are built, so it lands
    # after the dense ones: only a table that lists it last keeps the table's order.
    if any(not is_sparse(a) for a in args[len(dense) :]):
        raise ValueError(f"slice_args: sparse args must come last: {[a.name for a in args]}")
    return _compile(dense)


def slice_events(
    track: SliceTrack,
    kind: int | None,
    sel: np.ndarray | slice,
    names: np.ndarray,
    tids: list[int],
) -> list[Event]:
    """The events of the slices ``sel`` of ``track``, all of kind ``kind``.

    ``names`` maps name ids to names (an object array); ``tids`` is each slice's thread.
    """
    columns: list[list[Any]] = [
        names[track.name_id[sel]].tolist(),
        tids,
        (track.start_ns[sel] / 1000.0).tolist(),
        (track.duration_ns[sel] / 1000.0).tolist(),
    ]
    sparse = []
    for column in arg_columns(track, kind, sel):
        if column.where is None:
            columns.append(column.values)
        else:
            sparse.append(column)
    events = _builder(kind)(category_of(kind), track.pid, columns)
    for column in sparse:
        assert column.where is not None
        name = column.arg.name
        for i, value in zip(column.where.tolist(), column.values, strict=True):
            events[i]["args"][name] = value
    return events
