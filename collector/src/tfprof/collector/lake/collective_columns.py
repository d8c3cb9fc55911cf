"""The ``collective`` record column as the lake's typed, nullable collective columns.

A record's ``collective`` is a string-table index of canonical JSON (tfprof.core.collectives);
most records have none (0). Each distinct string of a batch is parsed once, and its
fields are spread to the rows by index, so a million kernels with a few hundred
collectives cost a ``np.unique`` and a few ``take``s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from tfprof.collector.lake.schema import Column
from tfprof.core import collectives


def expand(
    indices: np.ndarray, strings: Sequence[str], columns: Sequence[Column]
) -> dict[str, pa.Array]:
    """One array per column of ``columns`` (the lake's ``COLLECTIVE``) for the records
    whose ``collective`` column is ``indices`` (string-table ids of ``strings``)."""
    n = len(indices)
    if not n or not indices.any():
        return {c.name: pa.nulls(n, c.type) for c in columns}
    used, local = np.unique(indices, return_inverse=True)
    parsed: list[dict[str, Any]] = [
        collectives.parse(strings[i]) if 0 < i < len(strings) else {} for i in used.tolist()
    ]
    by_lake = {collectives.lake_column(f.key): f.key for f in collectives.FIELDS}
    rows = pa.array(local.astype(np.int32))
    out: dict[str, pa.Array] = {}
    for column in columns:
        key = by_lake[column.name]
        values = [fields.get(key) for fields in parsed]
        if pa.types.is_dictionary(column.type):
            plain = pa.array([v if isinstance(v, str) else None for v in values], pa.string())
            out[column.name] = plain.take(rows).dictionary_encode()
        else:
            out[column.name] = pa.array(values, column.type).take(rows)
    return out
