"""Collective arguments: what a communication kernel (or the op that issued it) says about
the collective it runs, as Kineto writes it, carried as one interned string per record.

PyTorch's profiler copies the arguments of ``record_param_comms`` onto the NCCL kernels
it launched (Kineto's ``Collective name``, ``In msg nelems``, ``Out msg nelems``, ``Group
size``, ``dtype``, ``Process Group Name`` / ``Description`` / ``Ranks``, and ``Seq`` since
2026). A record keeps them as the string-table index of a canonical JSON object (the
record column ``collective``; 0 = none): calls with the same arguments share one string,
a record without any costs nothing on the wire, and every reader and writer of records
carries them without knowing them. The collector expands the object into typed lake
columns (``FIELDS``). Imported inside traced processes (replay): standard library only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NamedTuple

# Kineto's key of the collective's name: an args dict holding it describes a collective.
NAME_KEY = "Collective name"


class Field(NamedTuple):
    key: str  # in the JSON object, and (with LAKE_PREFIX) the lake column's name
    kineto: str  # Kineto's arg name
    kind: str  # "str", "int" or "ranks" (a list of ints Kineto writes as a string)


FIELDS: tuple[Field, ...] = (
    Field("collective", NAME_KEY, "str"),
    Field("in_nelems", "In msg nelems", "int"),
    Field("out_nelems", "Out msg nelems", "int"),
    Field("group_size", "Group size", "int"),
    Field("dtype", "dtype", "str"),
    Field("pg_name", "Process Group Name", "str"),
    Field("pg_desc", "Process Group Description", "str"),
    Field("pg_ranks", "Process Group Ranks", "ranks"),
    Field("seq", "Seq", "int"),
)
FIELD_KEYS = tuple(f.key for f in FIELDS)
# Lake columns are ``collective`` (the name) and ``coll_<key>`` for the rest.
LAKE_PREFIX = "coll_"


def lake_column(key: str) -> str:
    return key if key == "collective" else LAKE_PREFIX + key


def _int(value: Any) -> int | None:
    if type(value) is int:
        return value
    if isinstance(value, bool) or value is None:
        return None
    try:
        return int(str(value))
    except ValueError:
        return None


def _ranks(value: Any) -> list[int] | None:
    """``"[0, 1]"`` (or a list) as ints; None when it is not a whole list of ints
    (a truncated ``"[0, 1, ...]"`` would be a wrong group)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if isinstance(value, list) and all(type(v) is int for v in value):
        return list(value)
    return None


def from_kineto(args: Mapping[str, Any]) -> str | None:
    """The canonical JSON of the collective ``args`` describe (keys in ``FIELDS`` order,
    absent or unreadable values left out); None when they name no collective."""
    name = args.get(NAME_KEY)
    if name is None or name == "":
        return None
    out: dict[str, Any] = {}
    for f in FIELDS:
        if f.kineto not in args:
            continue
        raw = args[f.kineto]
        value: Any = str(raw) if f.kind == "str" else _int(raw) if f.kind == "int" else _ranks(raw)
        if value is not None:
            out[f.key] = value
    return json.dumps(out, separators=(",", ":"))


def parse(text: str) -> dict[str, Any]:
    """The fields of a canonical collective string (``from_kineto``); {} if it is not one."""
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
