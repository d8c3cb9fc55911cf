"""How a view, a rule or an export says what it reads, and gets it (ENGINE_API.md in the
issue's notes walks through an example).

A ``Need`` declares two kinds of pieces, both plain values:

- ``Query``: SQL over the read's relations, ``{g}`` (GPU records) and ``{h}`` (host
  records), clipped to the window, or ``{g_all}`` and ``{h_all}``, the whole run, and
  ``{n_all}``, their rows counted (``clipped_sql``): what aggregates well (counts,
  sums, min, max, medians). Its result is a list of tuples.
- ``Sweep``: interval work over the records in time order with carried state (unions,
  gaps, cover, lanes, links): a hashable value (a frozen dataclass) whose ``start``
  makes a ``SweepState`` the engine feeds ``Chunk`` after ``Chunk``.

Equal pieces of one read (two rules asking the same ``Query`` or the same ``Sweep``)
run once. The engine runs every query first (one DuckDB connection, closed before the
sweep so the two peaks never add), then one time-ordered pass feeding every sweep,
then each need's ``build`` with what it declared (``Got``). ``build`` reads nothing
itself.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from tfprof.collector.read.time_chunks import Chunk

if TYPE_CHECKING:
    from tfprof.collector.read.engine import Read

R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)
T_co = TypeVar("T_co", covariant=True)


@dataclass(frozen=True)
class Query:
    """One SQL statement over ``{g}``, ``{h}``, ``{g_all}``, ``{h_all}``, ``{n_all}`` and
    ``{p}`` (one row per process: ``process``, ``job``, ``link``), written in braces and replaced by
    the relations' text; ``{lo}`` and ``{hi}`` are the window's bounds (NULL when open):
    its rows as tuples. Leave integers exact (counts, ``sum`` as HUGEINT,
    ``min``/``max``/``median`` of integers); divide and round in Python.

    ``by_process``: the statement reads each process's records apart from every other
    process's (each stage keyed by process, as the distributed views' ``rk``), so the
    engine runs it over a bounded group of processes at a time and concatenates the
    rows (``process_groups``): its memory is one group's, not the fleet's. ``gather``
    (a stage's name) reads by process too, up to that stage: the stages up to it run
    per group; its rows, gathered over the groups, feed the later stages and the final
    SELECT, run once (what matches rows across processes: the collectives' arrivals)."""

    sql: str
    by_process: bool = False
    gather: str | None = None

    @property
    def grouped(self) -> bool:
        """Run a group of processes at a time (``by_process`` or ``gather``)."""
        return self.by_process or self.gather is not None


class SweepState(Protocol[R_co]):
    """The carried state of one ``Sweep`` during a read."""

    def feed(self, chunk: Chunk) -> None:
        """Rows in start order (``s`` ascending), of the sweep's tables only, with at
        least its columns; no later row of this component starts before
        ``chunk.bound`` (``NEVER`` on a component's last chunk)."""

    def finish(self) -> R_co:
        """Every chunk was fed: the result (``Got.swept``). ``Read`` now knows the
        window's end and the GPUs listed."""


class Sweep(Hashable, Protocol[R_co]):
    """A piece of interval work, as a value: equal sweeps of one read share a state.

    ``tables``: the record tables whose rows it sees (``kernels``, ``copies``,
    ``memsets``, ``syncs``, ``api_calls``, ``markers``, ``memory``); ``columns``: the
    record columns beyond ``kind``, ``process``, ``s``, ``e`` (``time_chunks``).

    Rows come in start order per component (processes sharing a GPU), components one
    after another. A sweep that must see every process in one time order (across
    GPUs: ranks of a collective) says so with a class attribute ``whole_read = True``;
    the read then sweeps every process as one component.

    A sweep whose state starts from SQL figures (spans known before the first chunk)
    names those queries in an optional attribute ``queries`` (a tuple of ``Query``):
    they run with the needs' queries, and ``start`` reads them with ``Read.rows``."""

    @property
    def tables(self) -> frozenset[str]: ...

    @property
    def columns(self) -> frozenset[str]: ...

    def start(self, read: Read) -> SweepState[R_co]:
        """A fresh state for this read (``engine.Read``: the window's start, the GPU
        keys, the names); called before the first chunk."""


class Got:
    """What the engine found for the needs of one read: each query's rows and each
    sweep's result, and the read itself (``engine.Read``: jobs, processes, GPUs,
    window, names)."""

    def __init__(
        self, read: Read, rows: Mapping[Query, list[tuple[Any, ...]]], swept: Mapping[Any, Any]
    ) -> None:
        self.read = read
        self._rows = rows
        self._swept = swept

    def rows(self, query: Query) -> list[tuple[Any, ...]]:
        return self._rows[query]

    def swept(self, sweep: Sweep[R]) -> R:
        result: R = self._swept[sweep]
        return result


class Need(Protocol[T_co]):
    """What a view, a rule or an export reads, and what it makes of it."""

    def queries(self) -> Sequence[Query]:
        """The SQL it needs (may be empty)."""

    def sweeps(self) -> Sequence[Sweep[Any]]:
        """The interval work it needs (may be empty)."""

    def build(self, got: Got) -> T_co:
        """Its result, from ``got`` alone."""
