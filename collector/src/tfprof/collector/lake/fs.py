"""Where a lake lives: a local path or a URL pyarrow's filesystems open (``file://``,
``s3://``, ``gs://``, ``hdfs://``), and the file operations the lake needs: publish,
list, and read one file back as the lake's schema types it.

Publishing is atomic on every filesystem: locally a file is written under a hidden
temporary name (``.NAME.tmp``, which Spark, Trino and DuckDB's ``*.parquet`` globs all
skip), fsync'ed and renamed into place, the directory fsync'ed after. An object store
has no rename, but makes an object visible only when its upload completes (S3 and GCS
alike: one PUT, or a multipart / resumable upload that is completed last). The file is
therefore encoded whole in memory first and uploaded in one write: a failure while
encoding uploads nothing, and a failed upload is never completed. (Writing the Parquet
file straight into the upload stream would not do: a writer that fails half way still
closes the stream, which writes a footer and completes the upload of a valid, shorter
file.)
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow import fs as pafs

from tfprof.collector.errors import InvalidArgument, NotFound
from tfprof.collector.store.files import fsync_dir

SUFFIX = ".parquet"
# zstd at its default level: smaller than snappy on these columns (bench/store_bytes.py,
# bench/results/cpu-store-bytes.txt), and every engine we document (DuckDB, Spark 3+,
# Trino) reads it.
COMPRESSION = "zstd"
ROW_GROUP_ROWS = 1 << 20


@dataclass(frozen=True)
class Lake:
    url: str  # as the user wrote it (shown in messages, kept in watermarks)
    fs: pafs.FileSystem
    root: str  # the lake's directory inside ``fs``

    @property
    def local(self) -> bool:
        return isinstance(self.fs, pafs.LocalFileSystem)

    def path(self, relative: str) -> str:
        return f"{self.root.rstrip('/')}/{relative}"


def is_url(text: str) -> bool:
    return "://" in text


def open_lake(location: str | os.PathLike[str]) -> Lake:
    """The lake at a local path or URL; nothing is created or contacted yet."""
    text = os.fspath(location)
    if not is_url(text):
        return Lake(text, pafs.LocalFileSystem(), str(Path(text).absolute()))
    try:
        filesystem, root = pafs.FileSystem.from_uri(text)
    except (pa.ArrowException, ValueError, OSError) as exc:
        raise InvalidArgument(f"lake {text}: {exc}") from None
    return Lake(text, filesystem, root)


def write_parquet(lake: Lake, relative: str, table: pa.Table, sorted_by: str | None = None) -> int:
    """Publish ``table`` at ``relative`` inside the lake, whole or not at all; returns
    the file's size. An existing file of that name is replaced (a compaction redone after
    a crash writes the same rows under the same name). ``sorted_by``: the column the
    rows are in ascending order of, said in each row group's footer (``sorting_columns``,
    Parquet's own field: readers stream such row groups a batch at a time)."""
    path = lake.path(relative)
    if not lake.local:
        return _upload(lake, path, table, sorted_by)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    _write(table, str(tmp), sorted_by)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, target)
    fsync_dir(target.parent)
    return target.stat().st_size


def publish_file(lake: Lake, relative: str, written: Path) -> int:
    """Put the finished local file ``written`` in place at ``relative``, whole or not at
    all (renamed on a local lake, where it was written in the target's folder; uploaded
    in one write elsewhere, then removed); returns its size."""
    path = lake.path(relative)
    if not lake.local:
        data = written.read_bytes()  # compressed: a fraction of the rows it holds
        if lake.fs.type_name not in _FLAT:
            lake.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        with lake.fs.open_output_stream(path) as out:
            out.write(data)
        written.unlink()
        return len(data)
    target = Path(path)
    with open(written, "rb") as f:
        os.fsync(f.fileno())
    os.replace(written, target)
    fsync_dir(target.parent)
    return target.stat().st_size


# Object stores without directories: nothing to create before an upload.
_FLAT = frozenset({"s3", "gcs"})


def _upload(lake: Lake, path: str, table: pa.Table, sorted_by: str | None) -> int:
    """Publish on a filesystem without rename (see the module docstring)."""
    encoded = pa.BufferOutputStream()
    _write(table, encoded, sorted_by)
    data = encoded.getvalue()
    if lake.fs.type_name not in _FLAT:
        lake.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    with lake.fs.open_output_stream(path) as out:
        out.write(data)
    return int(data.size)


def _write(table: pa.Table, where: str | pa.NativeFile, sorted_by: str | None = None) -> None:
    order = None
    if sorted_by is not None:
        order = [pq.SortingColumn(table.schema.get_field_index(sorted_by))]
    pq.write_table(
        table,
        where,
        compression=COMPRESSION,
        row_group_size=ROW_GROUP_ROWS,
        # Dictionary pages for every column: names, ids and small enums shrink most.
        use_dictionary=True,
        sorting_columns=order,
        # Readers verify them: a flipped byte in a page is caught, not read as a number.
        write_page_checksum=True,
    )


def list_parquet(lake: Lake, table: str) -> list[pafs.FileInfo]:
    """Every published file of ``table`` (temporary and hidden files left out)."""
    selector = pafs.FileSelector(lake.path(table), recursive=True, allow_not_found=True)
    try:
        infos = lake.fs.get_file_info(selector)
    except (pa.ArrowException, OSError) as exc:
        raise NotFound(f"lake {lake.url}: cannot list {table}: {exc}") from None
    return [
        i
        for i in infos
        if i.type == pafs.FileType.File
        and i.base_name.endswith(SUFFIX)
        and not i.base_name.startswith((".", "_"))
    ]


def read_parquet(lake: Lake, path: str, schema: pa.Schema, columns: Sequence[str]) -> pa.Table:
    """``columns`` of one published file, as ``schema`` types them: a column typed
    otherwise is cast, and one the file lacks (written by an earlier release) reads as
    0 if it holds integers (what the record stream says of a field never set), else as
    null."""
    with lake.fs.open_input_file(path) as f:
        parquet = pq.ParquetFile(f, page_checksum_verification=True)
        stored = [c for c in columns if c in parquet.schema_arrow.names]
        return _conform(parquet.read(columns=stored, use_threads=True), schema, columns)


def _conform(table: pa.Table, schema: pa.Schema, columns: Sequence[str]) -> pa.Table:
    arrays = []
    for name in columns:
        want = schema.field(name).type
        if name not in table.column_names:
            n = table.num_rows
            missing = pa.repeat(0, n).cast(want) if pa.types.is_integer(want) else pa.nulls(n, want)
            arrays.append(pa.chunked_array([missing], want))
            continue
        column = table.column(name)
        arrays.append(column if column.type == want else column.cast(want))
    return pa.Table.from_arrays(arrays, names=list(columns))
