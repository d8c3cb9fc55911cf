"""A diff side's training steps: where they come from, and which of them the diff reads.

One small rule per side, said in the output, in the steps view's order of preference:
PyTorch's ``ProfilerStep#N`` ranges when the side has any (the steps the job itself
named); else the hook's STEP records (its zero-code optimizer-step and train-function
markers); else the whole run is one step. Step N of a process is the
range its record spans. Several processes (ranks) share step numbers: the side's step
count is the number of distinct step numbers the diff reads, so "per step" means the
whole job's time in one step.

``--steps`` picks the step numbers: ``all`` (default), ``first`` (each side's first:
HolisticTraceAnalysis' ``TraceDiff`` default), ``shared`` (the numbers both sides have),
or numbers and ranges for both sides (``1009``, ``4-6``, ``4,6``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import duckdb

from tfprof.collector.compare.diff_side import Side
from tfprof.collector.errors import InvalidArgument, NotFound

STEP_RECORDS = "STEP records"
PROFILER_STEPS = "ProfilerStep ranges"
WHOLE_RUN = "whole run"
# Every step source as SQL: one row per (process, step) with the range it spans.
_SOURCES = (
    (
        PROFILER_STEPS,
        "SELECT stream_id AS p, "
        "TRY_CAST(regexp_extract(name::VARCHAR, '^ProfilerStep#([0-9]+)$', 1) AS BIGINT) AS n, "
        "start_ns AS s, start_ns + duration_ns AS e "
        "FROM markers WHERE {where} AND regexp_matches(name::VARCHAR, '^ProfilerStep#[0-9]+$')",
    ),
    (
        STEP_RECORDS,
        "SELECT stream_id AS p, step AS n, start_ns AS s, start_ns + duration_ns AS e "
        "FROM steps WHERE {where}",
    ),
)
RECORD_TABLES = ("kernels", "copies", "memsets", "syncs", "api_calls", "markers", "memory")
# The whole run as one step per process: first start to last end (+1: ranges are
# half-open and a record may start at the last end).
_WHOLE = (
    "SELECT stream_id AS p, 0::BIGINT AS n, min(start_ns) AS s, "
    "max(start_ns + duration_ns) + 1 AS e FROM ({records}) GROUP BY stream_id"
)
STEPS_TABLE = "diff_steps"  # the temporary table of the steps read: p, n, s, e
_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


@dataclass(frozen=True)
class Steps:
    """What a side's steps come from and the numbers it has."""

    source: str
    numbers: tuple[int, ...]  # sorted, distinct; (0,) for the whole run
    processes: int  # processes of the side
    with_steps: int  # of them, processes that have steps of this source

    @property
    def whole(self) -> bool:
        return self.source == WHOLE_RUN


def find_steps(con: duckdb.DuckDBPyConnection, side: Side) -> Steps:
    processes = _count(con, f"SELECT count(DISTINCT stream_id) FROM streams WHERE {_ids(side)}")
    for source, sql in _SOURCES:
        query = sql.format(where=side.where)
        rows = con.execute(
            f"SELECT DISTINCT n FROM ({query}) WHERE n IS NOT NULL ORDER BY n"
        ).fetchall()
        if rows:
            with_steps = _count(con, f"SELECT count(DISTINCT p) FROM ({query})")
            return Steps(source, tuple(int(r[0]) for r in rows), processes, with_steps)
    return Steps(WHOLE_RUN, (0,), processes, processes)


def _ids(side: Side) -> str:
    """``Side.where`` without the time window: the streams table has no times."""
    kept = Side(side.role, side.label, side.origin, side.data_dirs, side.job, side.run,
                side.processes)  # fmt: skip
    return kept.where


def _count(con: duckdb.DuckDBPyConnection, sql: str) -> int:
    row = con.execute(sql).fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def select_steps(spec: str, base: Steps, test: Steps) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The step numbers each side reads for ``--steps SPEC``."""
    spec = spec.strip()
    if spec == "all":
        return base.numbers, test.numbers
    if spec == "first":
        return base.numbers[:1], test.numbers[:1]
    for role, steps in (("base", base), ("test", test)):
        if steps.whole:
            raise InvalidArgument(
                f"--steps {spec}: the {role} side has no steps (no STEP records, no "
                "ProfilerStep ranges: the whole run is one step); use all or first"
            )
    if spec == "shared":
        shared = tuple(sorted(set(base.numbers) & set(test.numbers)))
        if not shared:
            raise NotFound(
                f"--steps shared: no step number on both sides (base {_span(base.numbers)}, "
                f"test {_span(test.numbers)})"
            )
        return shared, shared
    wanted = parse_numbers(spec)
    picked = []
    for role, steps in (("base", base), ("test", test)):
        have = tuple(n for n in steps.numbers if n in wanted)
        if not have:
            raise NotFound(
                f"--steps {spec}: the {role} side has none of these steps "
                f"(it has {_span(steps.numbers)})"
            )
        picked.append(have)
    return picked[0], picked[1]


def parse_numbers(spec: str) -> frozenset[int]:
    wanted: set[int] = set()
    for part in spec.split(","):
        m = _RANGE.match(part.strip())
        if not m:
            raise InvalidArgument(
                f"--steps: {part.strip()!r} is not all, first, shared, a step number or "
                "a range N-M (several: comma-separated)"
            )
        low = int(m.group(1))
        high = int(m.group(2)) if m.group(2) else low
        if high < low:
            raise InvalidArgument(f"--steps: range {part.strip()} ends before it starts")
        wanted.update(range(low, high + 1))
    return frozenset(wanted)


def _span(numbers: tuple[int, ...]) -> str:
    """``#4-6`` for consecutive numbers, else ``#1, #3, #7`` (at most 6 shown)."""
    if not numbers:
        return "none"
    if numbers == tuple(range(numbers[0], numbers[-1] + 1)) and len(numbers) > 1:
        return f"#{numbers[0]}-{numbers[-1]}"
    shown = ", ".join(f"#{n}" for n in numbers[:6])
    return shown + (f" (+{len(numbers) - 6} more)" if len(numbers) > 6 else "")


def describe(steps: Steps, chosen: tuple[int, ...]) -> str:
    """One line for people: the source and the steps read."""
    if steps.whole:
        return f"steps: {WHOLE_RUN} (no STEP records, no ProfilerStep ranges) = 1 step"
    text = f"steps: {steps.source}, {len(chosen)} of {len(steps.numbers)} read ({_span(chosen)})"
    if steps.with_steps < steps.processes:
        text += (
            f"; {steps.processes - steps.with_steps} of {steps.processes} processes have "
            "none and are left out"
        )
    return text


def make_steps_table(
    con: duckdb.DuckDBPyConnection, side: Side, steps: Steps, chosen: tuple[int, ...]
) -> None:
    """``diff_steps(p, n, s, e)``: the ranges of the steps read, in the connection."""
    if steps.whole:
        records = " UNION ALL ".join(
            f"SELECT stream_id, start_ns, duration_ns FROM {t} WHERE {side.where}"
            for t in RECORD_TABLES
        )
        query = _WHOLE.format(records=records)
    else:
        source = dict(_SOURCES)[steps.source].format(where=side.where)
        numbers = ", ".join(str(int(n)) for n in chosen)
        query = f"SELECT * FROM ({source}) WHERE n IN ({numbers})"
    con.execute(f"CREATE OR REPLACE TEMP TABLE {STEPS_TABLE} AS {query}")
