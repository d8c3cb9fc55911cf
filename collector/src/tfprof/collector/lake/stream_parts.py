"""Where one stored stream's rows are (``StreamParts``: segment files and log-tail rows
per table) and those rows read back as Arrow tables (``read_rows``). A file that cannot
be read is left out, said once and remembered.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from tfprof.collector.lake.damaged import READ_ERRORS, DamagedFile, damaged_file, report
from tfprof.collector.lake.fs import Lake, read_parquet
from tfprof.collector.lake.schema import TABLES


@dataclass
class StreamParts:
    """Where one stream's rows are: segment files per table and log-tail rows per table."""

    files: dict[str, list[tuple[Lake, str]]] = field(default_factory=dict)
    tails: dict[str, list[pa.Table]] = field(default_factory=dict)
    # Files found unreadable (left out, said once): by path.
    damaged: dict[str, DamagedFile] = field(default_factory=dict)

    def read_file(
        self, lake: Lake, path: str, table: str, columns: Sequence[str]
    ) -> pa.Table | None:
        """One file's rows, or None (reported, remembered) when it cannot be read."""
        if path in self.damaged:
            return None
        try:
            return read_parquet(lake, path, TABLES[table].schema, columns)
        except READ_ERRORS as exc:
            self.note_damage(lake, path, exc)
            return None

    def note_damage(self, lake: Lake, path: str, exc: BaseException) -> None:
        found = self.damaged[path] = damaged_file(lake, path, exc)
        report(found)

    def tables(self) -> set[str]:
        return set(self.files) | set(self.tails)


def read_rows(parts: StreamParts, table: str, columns: Sequence[str]) -> pa.Table | None:
    """The stream's rows of ``table`` (segments in batch order, then the log tail); a
    file that cannot be read is left out (``StreamParts.damaged``)."""
    pieces = []
    by_lake: dict[int, tuple[Lake, list[str]]] = {}
    for lake, path in parts.files.get(table, ()):
        by_lake.setdefault(id(lake), (lake, []))[1].append(path)
    for lake, paths in by_lake.values():
        for path in sorted(paths):
            rows = parts.read_file(lake, path, table, columns)
            if rows is not None:
                pieces.append(rows)
    pieces += [t.select(list(columns)) for t in parts.tails.get(table, ())]
    if not pieces:
        return None
    return pa.concat_tables(pieces) if len(pieces) > 1 else pieces[0]
