"""The read's SQL statements run a stage at a time, under a memory limit.

A ``WITH a AS (...), b AS (...) SELECT ...`` statement runs as its stages
(``lake.sql_stages``): each CTE becomes a temporary table, then the final SELECT runs
over them. DuckDB then runs one operator pipeline at a time, and what a stage holds can
go to the temp directory while the next runs, so a read's DuckDB memory stays under
``MEMORY_LIMIT`` (figures: bench/results/cpu-dist-scale.txt). Statements that begin
with the same stages (the distributed views' launch tagging and step ranges, a rule's
steady kernels) share them: queries run in the order of their stages, and a stage
already made for the previous query is kept while the prefix up to it is the same text.

A statement that still runs out of memory under the limit is said in one line and run
again without it (DuckDB's default, 80 % of RAM): a figure late is better than none.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from tfprof.collector.lake.sql_stages import stages

if TYPE_CHECKING:
    import duckdb

log = logging.getLogger("tfprof.collector.read")
T = TypeVar("T")
# DuckDB's share of a read: its sorts, joins and aggregates spill past it; the sweeps'
# chunks and Python come on top.
MEMORY_LIMIT = "512MB"


def order(texts: Sequence[str]) -> list[int]:
    """Indices of ``texts`` in the order to run them: those sharing leading stages
    adjacent (sorted by their stage bodies)."""
    keys = [[body for _, body in stages(t)[0]] for t in texts]
    return sorted(range(len(texts)), key=lambda i: keys[i])


class StagedRunner:
    """Runs statements on ``con`` as their stages, keeping the last statement's stages
    while the next one begins with them."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con
        self._made: list[tuple[str, str]] = []  # stages now held, in order
        con.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")

    def rows(self, text: str) -> list[tuple[Any, ...]]:
        """The rows of statement ``text``."""
        return self._run(text, lambda final: self.con.sql(final).fetchall())

    def into(self, text: str, table: str, create: bool) -> None:
        """Statement ``text``'s rows added to temporary table ``table`` (made by the
        first call, ``create``)."""
        make = f"CREATE TEMP TABLE {table} AS " if create else f"INSERT INTO {table} "
        self._run(text, lambda final: self.con.execute(make + final))

    def reset(self) -> None:
        """Drops every stage held."""
        self._drop(0)

    def _run(self, text: str, last: Callable[[str], T]) -> T:
        import duckdb

        try:
            return self._stages(text, last)
        except duckdb.OutOfMemoryException as e:
            first = stages(text)[0][:1]
            where = f" (stage {first[0][0]})" if first else ""
            log.warning(
                "tfprof: a query%s ran out of DuckDB's %s; running it again without the "
                "limit (%s)", where, MEMORY_LIMIT, str(e).splitlines()[0],
            )  # fmt: skip
            self._drop(0)
            self.con.execute("RESET memory_limit")
            try:
                return self._stages(text, last)
            finally:
                self.con.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")

    def _stages(self, text: str, last: Callable[[str], T]) -> T:
        parts, final = stages(text)
        kept = 0
        while kept < min(len(parts), len(self._made)) and parts[kept] == self._made[kept]:
            kept += 1
        self._drop(kept)
        for name, body in parts[kept:]:
            self.con.execute(f"CREATE TEMP TABLE {name} AS {body}")
            self._made.append((name, body))
        return last(final)

    def _drop(self, keep: int) -> None:
        """Drops the held stages past the first ``keep``, newest first."""
        while len(self._made) > keep:
            name, _ = self._made.pop()
            self.con.execute(f"DROP TABLE IF EXISTS {name}")
