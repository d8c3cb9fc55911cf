"""The one table of slice arguments: what each record kind shows as a slice's args, everywhere.

Every exporter (Chrome JSON, Perfetto, XPlane, StepStats) writes these names and every
reader of our own exports parses them back through the same entries, so an argument is
named once. Exporters format a whole column at a time (``ArgType`` says how); readers
parse one value at a time with ``parse_value``.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from tfprof.core.cupti_labels import (
    API_CATEGORIES,
    COPY_KINDS,
    MEMORY_KINDS,
    MEMORY_OPS,
    PEER_COPY,
    SYNC_TYPES,
    Labels,
)
from tfprof.core.records import RecordKind


class ArgType(enum.Enum):
    INT = "int"  # one column, written as an integer
    LABEL = "label"  # one enum column, written as its label (``labels``)
    DIM3 = "dim3"  # three columns, written as "(x, y, z)"
    RATE = "rate"  # bytes / duration_ns = GB/s, rounded to 3 places; null when no duration
    PEER_DEVICE = "peer_device"  # the destination device, written only on peer-to-peer copies
    NONZERO = "nonzero"  # one column, written only where it is not 0 (0 means "none")


@dataclass(frozen=True)
class SliceArg:
    name: str  # the arg's name in every format
    columns: tuple[str, ...]  # record columns it is made of (RATE: bytes only)
    type: ArgType = ArgType.INT
    labels: Labels | None = None
    # Other spellings readers accept: Kineto's, and the column names hand-written traces use.
    aliases: tuple[str, ...] = ()


# GPU activity: what a stream track holds, and what readers of our exports read back.
CATEGORIES: Mapping[int, str] = {
    RecordKind.KERNEL: "kernel",
    RecordKind.MEMCPY: "memcpy",
    RecordKind.MEMSET: "memset",
    RecordKind.SYNC: "sync",
}
# The host side. A MARKER slice's category is its own (``cpu_op``, ``tf_op``, an NVTX
# domain), this one only when it has none.
HOST_CATEGORIES: Mapping[int, str] = {
    RecordKind.API: "cuda_api",
    RecordKind.MARKER: "marker",
    RecordKind.MEMORY: "memory",
    RecordKind.STEP: "step",
}
SLICE_CATEGORIES: Mapping[int, str] = {**CATEGORIES, **HOST_CATEGORIES}
OTHER_CATEGORY = "activity"
CATEGORY_KINDS: Mapping[str, int] = {label: kind for kind, label in CATEGORIES.items()}

CORRELATION = SliceArg("correlation", ("correlation",))
DEVICE = SliceArg("device", ("device",))
EXTERNAL_ID = SliceArg(
    "external id", ("external_id",), ArgType.NONZERO, aliases=("External id", "external_id")
)
COMMON: tuple[SliceArg, ...] = (
    CORRELATION,
    DEVICE,
    SliceArg("stream", ("stream",)),
    SliceArg("context", ("context",)),
)

BY_KIND: Mapping[int | None, tuple[SliceArg, ...]] = {
    RecordKind.KERNEL: (
        SliceArg("grid", ("grid_x", "grid_y", "grid_z"), ArgType.DIM3),
        SliceArg("block", ("block_x", "block_y", "block_z"), ArgType.DIM3),
        SliceArg("registers per thread", ("registers",), aliases=("registers",)),
        SliceArg(
            "static shared memory", ("static_smem",), aliases=("shared memory", "static_smem")
        ),
        SliceArg("dynamic shared memory", ("dynamic_smem",), aliases=("dynamic_smem",)),
        *COMMON,
    ),
    RecordKind.MEMCPY: (
        SliceArg("bytes", ("bytes",)),
        SliceArg("kind", ("copy_kind",), ArgType.LABEL, COPY_KINDS, ("copy_kind",)),
        SliceArg("src kind", ("src_kind",), ArgType.LABEL, MEMORY_KINDS, ("src_kind",)),
        SliceArg("dst kind", ("dst_kind",), ArgType.LABEL, MEMORY_KINDS, ("dst_kind",)),
        SliceArg("GB/s", ("bytes",), ArgType.RATE),
        *COMMON,
        SliceArg("dst device", ("dst_device",), ArgType.PEER_DEVICE, aliases=("dst_device",)),
    ),
    RecordKind.MEMSET: (
        SliceArg("bytes", ("bytes",)),
        SliceArg("memory kind", ("src_kind",), ArgType.LABEL, MEMORY_KINDS, ("src_kind",)),
        *COMMON,
    ),
    RecordKind.SYNC: (
        SliceArg("sync type", ("sync_type",), ArgType.LABEL, SYNC_TYPES, ("sync_type",)),
        *COMMON,
    ),
    # Host slices carry what the call or range says, not a device or stream it has not.
    RecordKind.API: (
        SliceArg("cbid", ("cbid",)),
        SliceArg("return value", ("return_value",), aliases=("return_value",)),
        SliceArg("api", ("category",), ArgType.LABEL, API_CATEGORIES),
        CORRELATION,
        EXTERNAL_ID,
    ),
    RecordKind.MARKER: (EXTERNAL_ID,),
    RecordKind.MEMORY: (
        SliceArg("bytes", ("bytes",)),
        SliceArg("memory op", ("memory_op",), ArgType.LABEL, MEMORY_OPS, ("memory_op",)),
        SliceArg("address", ("address",)),
        DEVICE,
    ),
    # A training step the hook marked: its number in the process.
    RecordKind.STEP: (SliceArg("step", ("external_id",)),),
    None: (SliceArg("kind", ("kind",)), *COMMON),
}


def args_of(kind: int | None) -> tuple[SliceArg, ...]:
    """The args a slice of ``kind`` carries (a kind we do not know gets the generic ones)."""
    return BY_KIND.get(kind, BY_KIND[None])


def category_of(kind: int | None) -> str:
    """The category of a slice of ``kind`` (a MARKER's own, when it has one, wins)."""
    return SLICE_CATEGORIES.get(kind, OTHER_CATEGORY) if kind is not None else OTHER_CATEGORY


def format_dim3(x: int, y: int, z: int) -> str:
    return f"({x}, {y}, {z})"


_DIGITS = re.compile(r"-?\d+")


def parse_value(arg: SliceArg, value: Any) -> tuple[int, ...]:
    """The column values of one written arg (``()`` when absent or unreadable).

    Accepts what our writers write and what other tools write for the same field:
    numbers as numbers, ``Decimal`` or strings, labels or their numeric values, dims as
    "(x, y, z)" or a list. A negative peer device is the writers' "not a peer copy".
    """
    if value is None or arg.type is ArgType.RATE:
        return ()  # RATE is derived from bytes and duration; nothing to store
    if arg.type is ArgType.DIM3:
        parts: Sequence[Any] = (
            value if isinstance(value, (list, tuple)) else _DIGITS.findall(str(value))
        )
        dims = tuple(n for n in map(_integer, parts) if n is not None)
        return dims if len(parts) == len(dims) == 3 else ()
    if arg.type is ArgType.LABEL and isinstance(value, str) and _integer(value) is None:
        assert arg.labels is not None
        return (arg.labels.parse(value),)
    number = _integer(value)
    if number is None or (arg.type is ArgType.PEER_DEVICE and number < 0):
        return ()
    return (number,)


def _integer(value: Any) -> int | None:
    """An integer from a JSON number, ``Decimal`` or numeric string; None for anything else."""
    if isinstance(value, bool):
        return None  # a JSON true/false is no count
    if isinstance(value, int):
        return value
    try:
        return int(Decimal(str(value).strip()))
    except (InvalidOperation, ValueError, OverflowError):  # junk, NaN, infinity
        return None


def find(args: Mapping[str, Any], arg: SliceArg) -> Any:
    """The value of ``arg`` in a slice's args by its name or an alias; None when absent."""
    for name in (arg.name, *arg.aliases):
        if name in args:
            return args[name]
    return None


__all__ = [
    "BY_KIND",
    "CATEGORIES",
    "CATEGORY_KINDS",
    "COMMON",
    "CORRELATION",
    "DEVICE",
    "EXTERNAL_ID",
    "HOST_CATEGORIES",
    "OTHER_CATEGORY",
    "PEER_COPY",
    "SLICE_CATEGORIES",
    "ArgType",
    "SliceArg",
    "args_of",
    "category_of",
    "find",
    "format_dim3",
    "parse_value",
]
