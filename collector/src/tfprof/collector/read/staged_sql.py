"""The read's SQL statements run a stage at a time, under a memory limit.

A ``WITH a AS (...), b AS (...) SELECT ...`` statement runs as its stages
(``lake.sql_stages``): each CTE becomes a temporary table, then the final SELECT runs
over them. DuckDB then runs one operator pipeline at a time, and what a stage holds can
go to the temp directory while the next runs, so a read's DuckDB memory stays under
``MEMORY_LIMIT`` (figures: bench/results/cpu-dist-scale.txt). Statements that begin
with the same stages (the distributed views' launch tagging and step ranges, a rule's
steady kernels) share them: queries run in the order of their stages (``plan``), and the
stages the next statement begins with are kept for it.

Any other stage is dropped as soon as the last stage that reads it is made: a stage held
costs memory outside the limit even once spilled (DuckDB keeps its blocks' metadata
resident: bench/duckdb_held_stages.py), and the steps statement of a rank of 10M GPU
records, holding each of its some forty stages to its end, put ``advise``'s peak there
(bench/results/cpu-dist-scale.txt).

A statement that still runs out of memory under the limit is said in one line and run
again without it (DuckDB's default, 80 % of RAM): a figure late is better than none.
"""

from __future__ import annotations

import logging
import re
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


def plan(texts: Sequence[str]) -> list[tuple[int, int]]:
    """``order``'s indices, each with how many leading stages its statement shares with
    the next one run (``StagedRunner.rows``' ``keep``; 0 for the last)."""
    run = order(texts)
    parts = [stages(texts[i])[0] for i in run]
    keep = []
    for this, then in zip(parts, [*parts[1:], []], strict=True):
        n = 0
        while n < min(len(this), len(then)) and this[n] == then[n]:
            n += 1
        keep.append(n)
    return list(zip(run, keep, strict=True))


def last_readers(parts: Sequence[tuple[str, str]], final: str) -> list[int]:
    """Per stage, the index of the last stage whose body names it (``len(parts)``: the
    final SELECT; its own index: nothing reads it). A name matched as a word anywhere
    (an alias, a column, a literal) only keeps a stage longer, never drops it early."""
    bodies = [body for _, body in parts] + [final]
    out = []
    for i, (name, _) in enumerate(parts):
        word = re.compile(rf"\b{re.escape(name)}\b")
        out.append(max((j for j in range(i + 1, len(bodies)) if word.search(bodies[j])),
                       default=i))  # fmt: skip
    return out


class StagedRunner:
    """Runs statements on ``con`` as their stages: a stage is dropped once the last stage
    reading it is made, but the first ``keep`` (those the next statement begins with)
    are kept for the next statement."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con
        # Stages of the last statement, in its order; None: dropped early (never one of
        # the first ``keep``, so the kept prefix has no holes).
        self._made: list[tuple[str, str] | None] = []
        con.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")

    def rows(self, text: str, keep: int = 0) -> list[tuple[Any, ...]]:
        """The rows of statement ``text``, its first ``keep`` stages kept (``plan``)."""
        return self._run(text, keep, lambda final: self.con.sql(final).fetchall())

    def into(self, text: str, table: str, create: bool, keep: int = 0) -> None:
        """Statement ``text``'s rows added to temporary table ``table`` (made by the
        first call, ``create``), its first ``keep`` stages kept."""
        make = f"CREATE TEMP TABLE {table} AS " if create else f"INSERT INTO {table} "
        self._run(text, keep, lambda final: self.con.execute(make + final))

    def reset(self) -> None:
        """Drops every stage held."""
        self._drop(0)

    def _run(self, text: str, keep: int, last: Callable[[str], T]) -> T:
        import duckdb

        try:
            return self._stages(text, keep, last)
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
                return self._stages(text, keep, last)
            finally:
                self.con.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")

    def _stages(self, text: str, keep: int, last: Callable[[str], T]) -> T:
        parts, final = stages(text)
        kept = 0
        while kept < min(len(parts), len(self._made)) and parts[kept] == self._made[kept]:
            kept += 1
        self._drop(kept)
        readers = last_readers(parts, final)
        self._release(keep, readers, kept - 1)  # kept ones whose readers are all made
        for k in range(kept, len(parts)):
            name, body = parts[k]
            self.con.execute(f"CREATE TEMP TABLE {name} AS {body}")
            self._made.append((name, body))
            self._release(keep, readers, k)
        try:
            return last(final)
        finally:
            self._drop(keep)

    def _release(self, keep: int, readers: Sequence[int], made: int) -> None:
        """Drops the stages past the first ``keep`` that no stage after ``made`` reads."""
        for i in range(keep, made + 1):
            held = self._made[i]
            if held is not None and readers[i] <= made:
                self.con.execute(f"DROP TABLE IF EXISTS {held[0]}")
                self._made[i] = None

    def _drop(self, keep: int) -> None:
        """Drops the held stages past the first ``keep``, newest first."""
        while len(self._made) > keep:
            held = self._made.pop()
            if held is not None:
                self.con.execute(f"DROP TABLE IF EXISTS {held[0]}")
