"""The records as chunks to pull (``stream``), for what writes as it reads: the
export's writers pull their parts a time chunk at a time instead of a sweep being fed."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from tfprof.collector.read.engine import Read
from tfprof.collector.read.lake_catalog import Catalog
from tfprof.collector.read.needs import Query
from tfprof.collector.read.shared_gpus import components
from tfprof.collector.read.time_chunks import ALWAYS, Chunk, chunks, plan_runs


def stream(
    cat: Catalog,
    tables: Sequence[str],
    columns: Sequence[str],
    rows: Mapping[Query, list[tuple[Any, ...]]] | None = None,
) -> tuple[Read, Iterator[Chunk]]:
    """The records of ``tables`` with ``columns`` (beyond ``ALWAYS``) as chunks to pull,
        in start order per component, components one after another, as a sweep sees them;
        no sweep, and no query (``rows``: queries' rows an earlier read found, for
        ``Read.rows``). For what writes as it reads (the export's writers pull their parts);
        names are interned into the ``Read``'s table; a file that cannot be read is said once
    and left out (``Read.damage``)."""
    state = Read(cat)
    state.query_rows = dict(rows or {})
    runs = plan_runs(cat, tables, state.found_damage)
    wanted = sorted(set(columns) - set(ALWAYS))

    def pulled() -> Iterator[Chunk]:
        for component in components(cat):
            mine = set(component)
            yield from chunks(
                [r for r in runs if r.process in mine],
                cat.window,
                wanted,
                state.names,
                state.found_damage,
            )

    return state, pulled()
