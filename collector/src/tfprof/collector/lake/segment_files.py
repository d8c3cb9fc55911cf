"""One range's segments, written a chunk at a time and published together at the end.

Compaction converts a range of a stream's batches a chunk of rows at a time
(``StreamCursor.take_chunks``); each chunk's rows go into its tables' files as row groups
at once, so memory holds one chunk, whatever the range or a single batch holds. The
files are written under hidden temporary names and published (renamed, or uploaded
whole to an object store, as fs.write_parquet does) only when the range is complete:
readers never see part of a segment, and a failure leaves no segment behind.

Record tables' row groups are each sorted by start (ties in arrival order) and say so in
their footers (Parquet's ``sorting_columns``): readers stream such a row group a batch
at a time (read/time_chunks.py) instead of reading it whole and sorting it. Sorting costs
no bytes (same columns, nearly the same runs: bench/results/cpu-read-scale.txt).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tfprof.collector.lake.arrays import arrow_numbers, numbers
from tfprof.collector.lake.fs import COMPRESSION, Lake, publish_file
from tfprof.collector.lake.segments import SegmentName, partition
from tfprof.collector.store.files import FILE_MODE


class SegmentFiles:
    """The files of one range: ``add`` rows as they come, then ``publish`` or ``abort``."""

    def __init__(self, lake: Lake, job: str, run: str) -> None:
        self.lake = lake
        self.job, self.run = job, run
        self._writers: dict[str, tuple[pq.ParquetWriter, Path]] = {}
        self.rows: dict[str, int] = {}

    def _temporary(self, table: str) -> Path:
        if self.lake.local:
            folder = Path(self.lake.path(partition(table, self.job, self.run)))
            folder.mkdir(parents=True, exist_ok=True)
        else:
            folder = Path(tempfile.gettempdir())
        # Hidden (a leading dot): Spark, Trino and DuckDB globs skip it.
        fd, name = tempfile.mkstemp(prefix=".segment-", suffix=".parquet.tmp", dir=folder)
        os.close(fd)
        os.chmod(name, FILE_MODE)
        return Path(name)

    def add(self, table: str, rows: pa.Table, sorted_by: str | None = None) -> None:
        """``rows`` as the next row group of ``table``'s file; ``sorted_by``: a column to
        sort them by, said in the footer (the same for every chunk of a table)."""
        if sorted_by is not None:
            order = np.argsort(numbers(rows.column(sorted_by)), kind="stable")
            rows = rows.take(arrow_numbers(order, pa.int64()))
        entry = self._writers.get(table)
        if entry is None:
            path = self._temporary(table)
            by = (
                None
                if sorted_by is None
                else [pq.SortingColumn(rows.schema.get_field_index(sorted_by))]
            )
            writer = pq.ParquetWriter(
                str(path), rows.schema, compression=COMPRESSION, use_dictionary=True,
                sorting_columns=by,
                # Readers verify them: a flipped byte in a page is caught (damaged.py).
                write_page_checksum=True,
            )  # fmt: skip
            entry = self._writers[table] = (writer, path)
        entry[0].write_table(rows)  # one row group per chunk
        self.rows[table] = self.rows.get(table, 0) + rows.num_rows

    def publish(self, name: SegmentName) -> list[tuple[str, str, int, int]]:
        """Close every file and put it in place under ``name``; (table, file name, rows,
        bytes) per file published."""
        written = []
        try:
            for table, (writer, path) in list(self._writers.items()):
                writer.close()
                relative = f"{partition(table, self.job, self.run)}/{name.file_name}"
                size = publish_file(self.lake, relative, path)
                written.append((table, name.file_name, self.rows[table], size))
                del self._writers[table]
        finally:
            self.abort()
        return written

    def abort(self) -> None:
        """Remove what was written and not published."""
        for writer, path in self._writers.values():
            with contextlib.suppress(Exception):
                writer.close()
            with contextlib.suppress(OSError):
                path.unlink()
        self._writers.clear()
