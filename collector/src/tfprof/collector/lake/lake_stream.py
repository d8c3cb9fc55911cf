"""A stored stream as the lake holds it (``LakeStream``: a ``StreamData`` of identity,
devices and counts whose records stay in its Parquet files and log tails, ``parts``,
for the read engine to read a time chunk at a time), the record tables' groups, and the
stream's host samples (``read_host_samples``: a sample a second, small).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tfprof.collector.jobdata import HOST_COLUMNS, StreamData, empty_host
from tfprof.collector.lake.arrays import numbers
from tfprof.collector.lake.schema import HOST_SAMPLES, RECORD_TABLES
from tfprof.collector.lake.stream_parts import StreamParts, read_rows
from tfprof.core.records import RecordKind

GPU_TABLES = tuple(RECORD_TABLES[k].name for k in (
    RecordKind.KERNEL, RecordKind.MEMCPY, RecordKind.MEMSET, RecordKind.SYNC))  # fmt: skip
HOST_TABLES = tuple(
    RECORD_TABLES[k].name for k in (RecordKind.API, RecordKind.MARKER, RecordKind.MEMORY)
)


@dataclass
class LakeStream(StreamData):
    """A ``StreamData`` whose records stay in the lake (``parts``): the read engine
    (``read.lake_catalog``, ``read.time_chunks``) reads them; ``records`` stays empty."""

    parts: StreamParts = field(default_factory=StreamParts, repr=False)


def read_host_samples(parts: StreamParts) -> dict[str, np.ndarray]:
    rows = read_rows(parts, HOST_SAMPLES.name, HOST_COLUMNS)
    if rows is None or not rows.num_rows:
        return empty_host()
    order = np.argsort(numbers(rows.column("time_ns")), kind="stable")
    out = {}
    for c in HOST_COLUMNS:
        dtype = np.float64 if c == "cpu_percent" else np.int64
        out[c] = numbers(rows.column(c)).astype(dtype)[order]
    # Host samples are stored on the collector clock: no shift is left to apply.
    return out
