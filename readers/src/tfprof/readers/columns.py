"""A builder's records, kept by layout, into full int64 columns sorted by start.

Each layout holds the columns its records set, in insertion order; ``order`` says
which layout each record came from. Scattering the layouts into full columns and
sorting them stably by start (ties keep insertion order) is done with numpy when it
is importable: a sort and 30 gathers of a million records take a few hundredths of a
second there and several seconds in Python. ``tfprof.core`` does not depend on numpy
(``replay:`` runs the readers inside user processes), so the standard library does
the same work otherwise, with the same result.
"""

from __future__ import annotations

import array
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from tfprof.core.records import COLUMNS

if TYPE_CHECKING:
    from types import ModuleType

Columns = dict[str, "array.array[int]"]


class LayoutColumns(Protocol):
    id: int
    kind: int
    columns: tuple[str, ...]
    values: array.array[int]  # row-major: one value per column, record after record


def sort_columns(
    layouts: Sequence[LayoutColumns],
    order: array.array[int],
    carried: array.array[int] | None = None,
) -> tuple[Columns, int, array.array[int] | None]:
    """(every column of ``COLUMNS``, start made relative to the earliest, that earliest
    start in ns, ``carried`` in the same order as the columns: one value per record in
    insertion order, such as the task each record belongs to); the layouts' values are
    released as they are used."""
    try:
        import numpy
    except ImportError:
        columns, origin, perm = _sort_stdlib(layouts, order)
        if carried is not None and perm is not None:
            carried = array.array("q", map(carried.__getitem__, perm))
        return columns, origin, carried
    return _sort_numpy(numpy, layouts, order, carried)


def _sort_numpy(
    np: ModuleType,
    layouts: Sequence[LayoutColumns],
    order: array.array[int],
    carried: array.array[int] | None,
) -> tuple[Columns, int, array.array[int] | None]:
    n = len(order)
    ids = np.frombuffer(order, dtype=np.uint8)
    parts = []  # (layout, its records as rows, where they are among all records)
    start = np.zeros(n, dtype=np.int64)
    for layout in layouts:
        rows = np.frombuffer(layout.values, dtype=np.int64).reshape(-1, len(layout.columns))
        if len(rows):
            at = slice(None) if len(rows) == n else np.flatnonzero(ids == layout.id)
            start[at] = rows[:, layout.columns.index("start_ns")]
            parts.append((layout, rows, at))
    origin = int(start.min()) if n else 0
    rank = None  # each record's place once sorted; None when already in order
    if not bool(np.all(start[1:] >= start[:-1])):
        rank = np.empty(n, dtype=np.intp)
        rank[np.argsort(start, kind="stable")] = np.arange(n)
    # Written straight into the arrays handed out, through numpy views of their memory.
    columns: Columns = {name: array.array("q", [0]) * n for name in COLUMNS}
    views = {name: np.frombuffer(column, dtype=np.int64) for name, column in columns.items()}
    for layout, rows, at in parts:
        to = at if rank is None else rank[at]
        views["kind"][to] = layout.kind
        for i, name in enumerate(layout.columns):
            views[name][to] = rows[:, i]
        layout.values = array.array("q")
    views["start_ns"] -= origin
    del views, parts  # release the arrays' buffers
    if carried is not None and rank is not None:
        moved = array.array("q", [0]) * n
        np.frombuffer(moved, dtype=np.int64)[rank] = np.frombuffer(carried, dtype=np.int64)
        carried = moved
    return columns, origin, carried


def _sort_stdlib(
    layouts: Sequence[LayoutColumns], order: array.array[int]
) -> tuple[Columns, int, list[int] | None]:
    """``sort_columns`` in the standard library, and the permutation it applied (None:
    none was needed)."""
    n = len(order)
    positions: dict[int, list[int]] = {layout.id: [] for layout in layouts}
    for i, layout_id in enumerate(order):
        positions[layout_id].append(i)
    full: Columns = {"kind": array.array("q", bytes(8 * n))}
    for layout in layouts:
        at = positions[layout.id]
        kinds = full["kind"]
        for i in at:
            kinds[i] = layout.kind
        width = len(layout.columns)
        for offset, name in enumerate(layout.columns):
            if name not in full:
                full[name] = array.array("q", bytes(8 * n))
            column = full[name]
            for i, value in zip(at, layout.values[offset::width]):
                column[i] = value
        layout.values = array.array("q")
    start = full.get("start_ns", array.array("q", bytes(8 * n)))
    in_order = all(a <= b for a, b in zip(start, start[1:]))
    perm = None if in_order else sorted(range(n), key=start.__getitem__)  # stable
    origin = min(start) if n else 0
    columns: Columns = {}
    for name in COLUMNS:
        if name not in full:
            columns[name] = array.array("q", bytes(8 * n))
            continue
        column = full.pop(name)
        if perm is not None:
            column = array.array("q", map(column.__getitem__, perm))
        if name == "start_ns":
            column = array.array("q", [v - origin for v in column])
        columns[name] = column
    return columns, origin, perm
