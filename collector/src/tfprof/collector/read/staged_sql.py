"""The read's SQL statements run a stage at a time, under a memory limit.

A ``WITH a AS (...), b AS (...) SELECT ...`` statement runs as its stages
(``lake.sql_stages``): each CTE becomes a temporary table, then the final SELECT runs
over them. DuckDB then runs one operator pipeline at a time, and what a stage holds can
go to the temp directory while the next runs, so a read's DuckDB memory stays under
``MEMORY_LIMIT`` (figures: bench/results/cpu-dist-scale.txt). Statements that begin
with the same stages (the distributed views' launch tagging and step ranges, a rule's
steady kernels) share them: queries run in the order of their stages (``plan``), and a
stage the next statement begins with is made once.

A stage is dropped as soon as no stage still to be made (of this statement, or past the
shared stages of the next) nor a final SELECT reads it: a stage held costs memory
outside the limit even once spilled (DuckDB keeps its blocks' metadata
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


def plan(texts: Sequence[str]) -> list[tuple[int, str | None]]:
    """``order``'s indices, each with the statement run after it (``StagedRunner.rows``'
    ``then``; None for the last)."""
    run = order(texts)
    return [(i, texts[j] if j is not None else None)
            for i, j in zip(run, [*run[1:], None], strict=True)]  # fmt: skip


def _names(name: str) -> re.Pattern[str]:
    # A name matched as a word anywhere (an alias, a column, a literal) only keeps a stage
    # longer, never drops one early.
    return re.compile(rf"\b{re.escape(name)}\b")


def last_readers(parts: Sequence[tuple[str, str]], final: str) -> list[int]:
    """Per stage, the index of the last stage whose body names it (``len(parts)``: the
    final SELECT; its own index: nothing reads it)."""
    bodies = [body for _, body in parts] + [final]
    out = []
    for i, (name, _) in enumerate(parts):
        word = _names(name)
        out.append(max((j for j in range(i + 1, len(bodies)) if word.search(bodies[j])),
                       default=i))  # fmt: skip
    return out


def _read_after(parts: Sequence[tuple[str, str]], final: str, start: int, name: str) -> bool:
    """Whether a stage from ``start`` on or the final SELECT names ``name``."""
    word = _names(name)
    return any(word.search(body) for _, body in parts[start:]) or bool(word.search(final))


def _shared(a: Sequence[tuple[str, str]], b: Sequence[tuple[str, str]]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


class StagedRunner:
    """Runs statements on ``con`` as their stages, each dropped once nothing still to
    run reads it; the stages the next statement (``then``) begins with and reads past
    them are kept for it."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con
        # Stages of the last statement, in its order, and which of them are dropped.
        self._made: list[tuple[str, str]] = []
        self._gone: set[int] = set()
        con.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")

    def rows(self, text: str, then: str | None = None) -> list[tuple[Any, ...]]:
        """The rows of statement ``text``; ``then``: the statement run next (``plan``)."""
        return self._run(text, then, lambda final: self.con.sql(final).fetchall())

    def into(self, text: str, table: str, create: bool, then: str | None = None) -> None:
        """Statement ``text``'s rows added to temporary table ``table`` (made by the
        first call, ``create``); ``then``: the statement run next."""
        make = f"CREATE TEMP TABLE {table} AS " if create else f"INSERT INTO {table} "
        self._run(text, then, lambda final: self.con.execute(make + final))

    def reset(self) -> None:
        """Drops every stage held."""
        self._drop(0)

    def _run(self, text: str, then: str | None, last: Callable[[str], T]) -> T:
        import duckdb

        try:
            return self._stages(text, then, last)
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
                return self._stages(text, then, last)
            finally:
                self.con.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")

    def _stages(self, text: str, then: str | None, last: Callable[[str], T]) -> T:
        parts, final = stages(text)
        kept = _shared(parts, self._made)
        # A stage dropped while the last statement ran is one this one never reads past
        # the shared stages (``then`` said so); if it does, it is made again from there.
        while need := [
            i for i in self._gone if i < kept and _read_after(parts, final, kept, parts[i][0])
        ]:
            kept = min(need)
        self._drop(kept)
        # Held to its last reader: a stage's own readers, and for a stage the next
        # statement begins with and reads past them, the next statement.
        until = last_readers(parts, final)
        if then is not None:
            after, after_final = stages(then)
            shared = _shared(parts, after)
            for i in range(shared):
                if _read_after(after, after_final, shared, parts[i][0]):
                    until[i] = len(parts) + 1
        self._release(until, kept - 1)  # kept ones whose readers are all made
        for k in range(kept, len(parts)):
            name, body = parts[k]
            self.con.execute(f"CREATE TEMP TABLE {name} AS {body}")
            self._made.append((name, body))
            self._release(until, k)
        try:
            return last(final)
        finally:
            self._release(until, len(parts))
            self._drop(max((i + 1 for i, u in enumerate(until) if u > len(parts)), default=0))

    def _release(self, until: Sequence[int], made: int) -> None:
        """Drops the stages held that no stage after ``made`` reads (``until``)."""
        for i in range(min(made + 1, len(until))):
            if i not in self._gone and until[i] <= made:
                self.con.execute(f"DROP TABLE IF EXISTS {self._made[i][0]}")
                self._gone.add(i)

    def _drop(self, keep: int) -> None:
        """Drops the stages past the first ``keep``, newest first."""
        while len(self._made) > keep:
            name, _ = self._made.pop()
            if len(self._made) not in self._gone:
                self.con.execute(f"DROP TABLE IF EXISTS {name}")
            self._gone.discard(len(self._made))
