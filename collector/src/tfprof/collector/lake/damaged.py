"""Files of the lake a reader cannot read (a torn write, a flipped byte, a disk error):
each is found, said once in one line (the file, its job and run, the rows it held per
the lake's own bookkeeping, the reason) and left out, and the read goes on with the
rest (issue 23 item 5).

The bookkeeping is the ``segments`` table: compaction writes, after a range's files,
one row per file with the rows and bytes it holds. Files are written with page
checksums, and every pyarrow read verifies them, so a flipped byte in a page is caught
rather than read as a wrong number.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tfprof.collector.lake.arrays import arrow_numbers, arrow_strings
from tfprof.collector.lake.fs import Lake
from tfprof.collector.lake.schema import SEGMENTS
from tfprof.collector.lake.segments import parse_partition

# Its own logger: ``jobs`` says each damaged file under its table instead.
log = logging.getLogger("tfprof.collector.lake.damaged")
# What reading a damaged file raises: pyarrow's errors and the OS's.
READ_ERRORS = (OSError, pa.ArrowException)


@dataclass(frozen=True)
class DamagedFile:
    path: str
    table: str
    job: str
    run: str
    rows: int | None  # what the bookkeeping says it held; None: unknown
    reason: str

    def line(self) -> str:
        held = (
            "rows unknown" if self.rows is None
            else f"{self.rows:,} row{'' if self.rows == 1 else 's'} per the lake's segments table"
        )  # fmt: skip
        return f"skipped {self.path} (job {self.job} run {self.run}, {held}): {self.reason}"


_reported: set[str] = set()


def report(damaged: DamagedFile) -> None:
    """Say it once per process, whichever reader finds it first."""
    if damaged.path not in _reported:
        _reported.add(damaged.path)
        log.warning("%s", damaged.line())


def reason_of(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return (text or type(exc).__name__)[:300]


def segments_table(
    stream_id: str, first_seq: int, last_seq: int, written: Sequence[tuple[str, str, int, int]]
) -> pa.Table:
    """A range's bookkeeping rows: (table, file name, rows, bytes) per file written."""
    n = len(written)

    def ints(values: list[int]) -> pa.Array:
        return arrow_numbers(np.array(values, dtype=np.int64), pa.int64())

    columns = [
        arrow_strings([stream_id] * n),
        arrow_strings([w[0] for w in written]),
        arrow_strings([w[1] for w in written]),
        ints([first_seq] * n),
        ints([last_seq] * n),
        ints([w[2] for w in written]),
        ints([w[3] for w in written]),
    ]
    return pa.Table.from_arrays(columns, schema=SEGMENTS.schema)


# What a local file streamed a batch at a time reads ahead per column: not the whole
# column chunk (a streamed read holds a file open per process and table at once).
STREAM_BUFFER = 1 << 16


def open_verified(lake: Lake, path: str, streamed: bool = False) -> pq.ParquetFile:
    """A lake file opened for reading, its pages' checksums verified as they are read;
    ``streamed``: read in small pieces as batches are asked for (local files only: on
    an object store each piece would be a request)."""
    source = path if lake.local else lake.fs.open_input_file(path)
    if streamed and lake.local:
        return pq.ParquetFile(
            source, page_checksum_verification=True, pre_buffer=False, buffer_size=STREAM_BUFFER
        )
    return pq.ParquetFile(source, page_checksum_verification=True)


def held_rows(lake: Lake, path: str) -> int | None:
    """The rows the bookkeeping says ``path`` holds (the range's ``segments`` file)."""
    parts = path.split("/")
    try:
        at = max(i for i, p in enumerate(parts) if p.startswith("job="))
    except ValueError:
        return None
    table, name = parts[at - 1], parts[-1]
    book = "/".join([*parts[: at - 1], SEGMENTS.name, *parts[at:]])
    if book == path:
        return None
    try:
        rows = open_verified(lake, book).read(columns=["data_table", "file", "rows"]).to_pylist()
    except READ_ERRORS:
        return None
    found = [r["rows"] for r in rows if r["data_table"] == table and r["file"] == name]
    return int(found[0]) if found else None


def damaged_file(lake: Lake, path: str, exc: BaseException | str) -> DamagedFile:
    """The damage found reading ``path``, with its job, run, table and rows held."""
    where = parse_partition(path) or ("?", "?")
    parts = path.split("/")
    table = next((parts[i - 1] for i, p in enumerate(parts) if p.startswith("job=")), "?")
    reason = exc if isinstance(exc, str) else reason_of(exc)
    return DamagedFile(path, table, where[0], where[1], held_rows(lake, path), reason)


def probe(lake: Lake, path: str) -> str | None:
    """Why ``path`` cannot be read whole (None: it can): its footer, and every page of
    every row group with its checksum."""
    try:
        file = open_verified(lake, path)
        for i in range(file.metadata.num_row_groups):
            file.read_row_group(i)
    except READ_ERRORS as exc:
        return reason_of(exc)
    return None


def footer_check(lake: Lake, path: str, expected_bytes: int | None) -> str | None:
    """Why ``path`` is damaged by what is cheap to see (None: nothing seen): its size
    against the bookkeeping's, and its footer. Pages are only read by ``probe``."""
    try:
        if expected_bytes is not None:
            size = lake.fs.get_file_info(path).size
            if size != expected_bytes:
                return f"{size:,} bytes where the lake's segments table says {expected_bytes:,}"
        open_verified(lake, path).metadata  # noqa: B018 - reads and checks the footer
    except READ_ERRORS as exc:
        return reason_of(exc)
    return None


def bookkeeping(lake: Lake, files: Sequence[str]) -> dict[str, tuple[int, int]]:
    """(rows, bytes) the ``segments`` table says each of ``files`` holds, where it says."""
    out: dict[str, tuple[int, int]] = {}
    books: dict[str, list[str]] = {}
    for path in files:
        parts = path.split("/")
        at = next((i for i, p in enumerate(parts) if p.startswith("job=")), None)
        if at is None or parts[at - 1] == SEGMENTS.name:
            continue
        book = "/".join([*parts[: at - 1], SEGMENTS.name, *parts[at:]])
        books.setdefault(book, []).append(path)
    for book, paths in books.items():
        try:
            rows = open_verified(lake, book).read().to_pylist()
        except READ_ERRORS:
            continue  # its own damage is found when it is checked
        held = {(r["data_table"], r["file"]): (r["rows"], r["bytes"]) for r in rows}
        for path in paths:
            parts = path.split("/")
            at = next(i for i, p in enumerate(parts) if p.startswith("job="))
            found = held.get((parts[at - 1], parts[-1]))
            if found is not None:
                out[path] = found
    return out
