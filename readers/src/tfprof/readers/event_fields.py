"""Parsing a trace event's fields: µs times as exact integer ns, non-negative ints, the
args of an event, and the record columns its slice args fill.

Times: ``ts``/``dur`` are (possibly fractional) µs; JSON floats are parsed as
``Decimal`` so ns survive exactly at epoch magnitudes, then rounded half-even to
integer ns.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from tfprof.core.slice_args import ArgType, SliceArg, parse_value
from tfprof.readers.trace import Event

_THOUSAND = Decimal(1000)


def us_to_ns(value: Any) -> int:
    """A ``ts``/``dur`` in µs (int, Decimal, float or numeric string) as integer ns."""
    if isinstance(value, bool):
        raise TypeError("bool")
    if isinstance(value, int):
        return value * 1000
    if isinstance(value, Decimal):
        return int((value * 1000).to_integral_value())  # half-even, like round()
    if isinstance(value, float):
        return round(value * 1000)
    if isinstance(value, str):
        return us_to_ns(Decimal(value))
    raise TypeError(type(value).__name__)


def ns_to_us(ns: int) -> Decimal:
    """Integer ns as the µs of a built event: exact, so ``us_to_ns`` gives back the same ns."""
    return Decimal(ns) / _THOUSAND


def non_negative(value: Any, default: int = 0) -> int:
    """A non-negative integer field from args, tolerating Decimal / str / junk."""
    if type(value) is int:
        return value if value >= 0 else default
    if isinstance(value, bool) or value is None:
        return default
    try:
        number = int(value) if isinstance(value, int) else int(Decimal(str(value)))
    except (ValueError, InvalidOperation, OverflowError):
        return default
    return number if number >= 0 else default


def metadata_event(kind: str, pid: int, name: str, tid: int | None = None) -> Event:
    """A ``process_name`` / ``thread_name`` metadata event, as binary readers build them."""
    event: Event = {"ph": "M", "name": kind, "pid": pid, "args": {"name": name}}
    if tid is not None:
        event["tid"] = tid
    return event


def event_args(event: Event) -> dict[str, Any]:
    args = event.get("args")
    return args if isinstance(args, dict) else {}


def arg_columns(args: Mapping[str, Any], wanted: Iterable[SliceArg]) -> dict[str, int]:
    """Record columns from the slice args ``wanted`` (by their shared names and aliases).

    Args that are absent or unreadable are left out (their columns stay 0); negative
    values, which no count or id of ours can take, read as 0.
    """
    wanted = wanted if isinstance(wanted, tuple) else tuple(wanted)
    values: dict[str, int] = {}
    for arg, key, plain in arg_plan(args, wanted):
        value = args[key]
        if plain and type(value) is int:  # most args: one int column, written as an int
            values[arg.columns[0]] = value if value > 0 else 0
            continue
        parsed = parse_value(arg, value)
        if parsed:
            if len(parsed) != len(arg.columns):
                raise ValueError(f"{arg}: {len(parsed)} values for {len(arg.columns)} columns")
            values.update(zip(arg.columns, (max(0, v) for v in parsed)))
    return values


# (id of a ``wanted`` tuple, the keys of an args dict) -> (arg, the key it is found by, is
# it a plain int): which args are present depends on the keys only, and a million events
# of a trace have a handful of key sets.
_Plan = tuple[tuple[SliceArg, str, bool], ...]
_PLANS: dict[tuple[int, tuple[str, ...]], _Plan] = {}
_PLANNED: dict[int, tuple[SliceArg, ...]] = {}  # keeps each planned tuple (and its id) alive
_MAX_PLANS = 4096


def arg_plan(args: Mapping[str, Any], wanted: tuple[SliceArg, ...]) -> _Plan:
    """(arg, the key it is found by, whether it is one plain int column) for each of
    ``wanted`` present in ``args``, in ``wanted`` order; cached by ``args``' keys."""
    key = (id(wanted), tuple(args))
    plan = _PLANS.get(key)
    if plan is not None and _PLANNED.get(id(wanted)) is wanted:
        return plan
    found = []
    for arg in wanted:
        for name in (arg.name, *arg.aliases):  # as ``find`` looks an arg up
            if name in args:
                found.append((arg, name, arg.type is ArgType.INT and len(arg.columns) == 1))
                break
    plan = tuple(found)
    if len(_PLANS) < _MAX_PLANS and len(_PLANNED) < 64:
        _PLANNED[id(wanted)] = wanted
        _PLANS[key] = plan
    return plan
