"""A diff side's training steps: where they come from, and which of them the diff reads.

One small rule per side, said in the output, in the steps view's order of preference:
PyTorch's ``ProfilerStep#N`` ranges when the side has any (the steps the job itself
named); else the hook's STEP records (its zero-code optimizer-step and train-function
markers); else the kernel stream's period, as the steps view finds it (one SQL
definition: ``lake.dist_sql.PERIODIC_STEPS``); else the whole run is one step. Step N
of a process is the range its record spans; a periodic step runs from its anchor
kernel's launch to the next one's (step 0 the first; the last, whose end the capture
cut off, is not read: the steps view leaves it out too). Several processes (ranks)
share step numbers: the side's step count is the number of distinct step numbers the
diff reads, so "per step" means the whole job's time in one step.

``--steps`` picks the step numbers: ``all`` (default), ``first`` (each side's first:
HolisticTraceAnalysis' ``TraceDiff`` default), ``shared`` (the numbers both sides have),
or numbers and ranges for both sides (``1009``, ``4-6``, ``4,6``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tfprof.collector.compare.diff_read import read_rows
from tfprof.collector.errors import InvalidArgument, NotFound
from tfprof.collector.lake.dist_sql import ENGINE, PERIODIC_STEPS
from tfprof.collector.read.lake_catalog import Catalog
from tfprof.collector.read.needs import Query

STEP_RECORDS = "STEP records"
PROFILER_STEPS = "ProfilerStep ranges"
PERIODICITY = "kernel periodicity"
WHOLE_RUN = "whole run"
SOURCES = {1: PROFILER_STEPS, 2: STEP_RECORDS, 3: PERIODICITY}
# Every step of every source: one row per (source, process, step) with the range it
# spans (the engine's relations: clipped to the side's window).
STEP_RANGES = """
SELECT 1 AS src, process AS p,
       TRY_CAST(regexp_extract(name, '^ProfilerStep#([0-9]+)$', 1) AS BIGINT) AS n, s, e
FROM {h} WHERE kind = 6 AND regexp_matches(name, '^ProfilerStep#[0-9]+$')
UNION ALL
SELECT 2, process, external_id, s, e FROM {st}
"""
# The steps view's periodic steps, complete ones only (read only when no process of the
# side has either of the above: a side's first source is its source for every process).
PERIODIC_RANGES = (
    f"SELECT rk AS p, num AS n, lo AS s, hi AS e FROM ({ENGINE.bind(PERIODIC_STEPS)}) AS ps"
)
# Per source: its step numbers (``procs`` NULL), and its processes (``n`` NULL).
_FOUND = (
    "WITH r AS ({ranges}) "
    "SELECT src, n, NULL AS procs FROM r WHERE n IS NOT NULL GROUP BY src, n "
    "UNION ALL SELECT src, NULL, count(DISTINCT p) FROM r WHERE n IS NOT NULL GROUP BY src"
)
_FOUND_MARKS = Query(_FOUND.format(ranges=STEP_RANGES))
_FOUND_PERIODIC = Query(_FOUND.format(ranges=f"SELECT 3 AS src, * FROM ({PERIODIC_RANGES})"))
# The whole run as one step per process: first start to last end (+1: ranges are
# half-open and a record may start at the last end).
_WHOLE = """
SELECT process AS p, 0::BIGINT AS n, min(s) AS s, max(e) + 1 AS e
FROM (SELECT process, s, e FROM {g} UNION ALL SELECT process, s, e FROM {h}) GROUP BY process
"""
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


def find_steps(cat: Catalog) -> Steps:
    """The side's step source (the first one it has) and its step numbers."""
    _, (rows,) = read_rows(cat, _FOUND_MARKS)
    if not any(n is not None for _, n, _ in rows):
        _, (rows,) = read_rows(cat, _FOUND_PERIODIC)
    processes = len(cat.processes)
    for src, source in SOURCES.items():
        numbers = tuple(sorted(int(n) for s, n, _ in rows if s == src and n is not None))
        if numbers:
            with_steps = next(int(c) for s, n, c in rows if s == src and n is None)
            return Steps(source, numbers, processes, with_steps)
    return Steps(WHOLE_RUN, (0,), processes, processes)


def steps_sql(steps: Steps, chosen: tuple[int, ...]) -> str:
    """The ranges of the steps read, ``(p, n, s, e)``, as SQL over the relations."""
    if steps.whole:
        return _WHOLE
    src = next(k for k, v in SOURCES.items() if v == steps.source)
    listed = ", ".join(str(int(n)) for n in chosen)
    keep = "" if chosen == steps.numbers else f" AND n IN ({listed})"
    if steps.source == PERIODICITY:
        return f"SELECT p, n, s, e FROM ({PERIODIC_RANGES}) AS pr WHERE true{keep}"
    return f"SELECT p, n, s, e FROM ({STEP_RANGES}) WHERE src = {src}{keep}"


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
                "ProfilerStep ranges, no kernel period: the whole run is one step); use all "
                "or first"
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
        return (
            f"steps: {WHOLE_RUN} (no STEP records, no ProfilerStep ranges, no kernel period) "
            "= 1 step"
        )
    text = f"steps: {steps.source}, {len(chosen)} of {len(steps.numbers)} read ({_span(chosen)})"
    if steps.with_steps < steps.processes:
        text += (
            f"; {steps.processes - steps.with_steps} of {steps.processes} processes have "
            "none and are left out"
        )
    return text
