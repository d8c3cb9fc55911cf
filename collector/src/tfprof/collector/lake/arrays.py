"""Arrow columns of numbers as numpy arrays and back, without pyarrow's ``to_numpy`` or
``pa.array``: both import pandas wherever pandas is installed (as it is with HTA, and in
most ML environments): time added to every ``summary``, ``advise`` and ``export`` for
nothing a column of numbers needs (bench/results/cpu-design-choices.txt, "to_numpy")."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

_DTYPES: dict[pa.DataType, np.dtype] = {
    t: np.dtype(d)
    for t, d in (
        (pa.int8(), np.int8), (pa.int16(), np.int16), (pa.int32(), np.int32),
        (pa.int64(), np.int64), (pa.uint8(), np.uint8), (pa.uint16(), np.uint16),
        (pa.uint32(), np.uint32), (pa.uint64(), np.uint64), (pa.float32(), np.float32),
        (pa.float64(), np.float64),
    )
}  # fmt: skip


def numbers(column: pa.ChunkedArray | pa.Array, null: float | None = None) -> np.ndarray:
    """The values of an integer or floating-point column: a read-only view of Arrow's
    buffer when it is one chunk without nulls, else a copy. Nulls read as ``null``;
    with None, a column with nulls, or of another type, converts as ``to_numpy`` would
    (nulls of integers as NaN)."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    parts = [_chunk(c, null) for c in chunks]
    if len(parts) == 1:
        return parts[0]
    if not parts:
        return np.zeros(0, dtype=_DTYPES.get(column.type, np.dtype(np.float64)))
    return np.concatenate(parts)


def _chunk(array: pa.Array, null: float | None) -> np.ndarray:
    dtype = _DTYPES.get(array.type)
    if dtype is None or (array.null_count and null is None):
        converted: np.ndarray = array.to_numpy(zero_copy_only=False)
        return converted
    validity, values = array.buffers()[:2]
    if values is None:  # no rows
        return np.zeros(0, dtype=dtype)
    n, at = len(array), array.offset
    view: np.ndarray = np.frombuffer(values, dtype=dtype, count=n, offset=at * dtype.itemsize)
    if not array.null_count:
        return view
    bits = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), bitorder="little")
    return np.where(bits[at : at + n].astype(bool), view, np.array(null, dtype=dtype))


def arrow_numbers(values: np.ndarray, type_: pa.DataType) -> pa.Array:
    """``values`` (numbers that fit ``type_``, a fixed-width integer or floating type)
    as an Arrow array without nulls."""
    dtype = _DTYPES[type_]
    data = np.ascontiguousarray(values, dtype=dtype)
    return pa.Array.from_buffers(type_, data.shape[0], [None, pa.py_buffer(data)])


def arrow_strings(values: list[str]) -> pa.Array:
    """``values`` as an Arrow string array without nulls."""
    encoded = [v.encode("utf-8", "surrogatepass") for v in values]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int32)
    np.cumsum([len(b) for b in encoded], out=offsets[1:])
    data = b"".join(encoded)
    buffers = [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.Array.from_buffers(pa.string(), len(encoded), buffers)


__all__ = ["arrow_numbers", "arrow_strings", "numbers"]
