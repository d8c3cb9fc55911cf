"""The shared vocabulary the readers parse with: every spelling the recorded files use."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from tfprof.core.cupti_labels import COPY_KINDS, MEMORY_KINDS, SYNC_TYPES
from tfprof.core.records import RecordKind
from tfprof.core.slice_args import args_of, find, parse_value

# (labels, spelling, value): our exports', Kineto's, TF's and older tfprof spellings.
SPELLINGS = [
    (COPY_KINDS, "HtoD", 1), (COPY_KINDS, "htod", 1), (COPY_KINDS, "DtoH", 2),
    (COPY_KINDS, "DtoD", 8), (COPY_KINDS, "PtoP", 10), (COPY_KINDS, "Unknown", 0),
    (MEMORY_KINDS, "Pageable", 1), (MEMORY_KINDS, "pinned", 2), (MEMORY_KINDS, "Device", 3),
    (MEMORY_KINDS, "Device Static", 6), (MEMORY_KINDS, "device_static", 6),
    (MEMORY_KINDS, "Managed Static", 7), (MEMORY_KINDS, "managed_static", 7),
    (SYNC_TYPES, "Event Sync", 1), (SYNC_TYPES, "EventSynchronize", 1),
    (SYNC_TYPES, "Stream Wait Event", 2), (SYNC_TYPES, "StreamWaitEvent", 2),
    (SYNC_TYPES, "Stream Sync", 3), (SYNC_TYPES, "StreamSynchronize", 3),
    (SYNC_TYPES, "Context Sync", 4), (SYNC_TYPES, "contextsynchronize", 4),
    (SYNC_TYPES, "something new", 0),
]  # fmt: skip


@pytest.mark.parametrize(("labels", "text", "value"), SPELLINGS)
def test_labels_parse_every_spelling_of_the_recorded_files(
    labels: Any, text: str, value: int
) -> None:
    assert labels.parse(text) == value


def _arg(kind: RecordKind, name: str) -> Any:
    return next(arg for arg in args_of(kind) if arg.name == name)


def test_parse_value_takes_numbers_labels_and_dims_in_every_written_form() -> None:
    registers = _arg(RecordKind.KERNEL, "registers per thread")
    for written in (64, "64", Decimal("64"), Decimal("64.0"), 64.0):
        assert parse_value(registers, written) == (64,)
    for junk in (None, True, "many", [64], Decimal("NaN"), float("inf")):
        assert parse_value(registers, junk) == ()
    grid = _arg(RecordKind.KERNEL, "grid")
    assert parse_value(grid, "(4, 2, 1)") == parse_value(grid, [4, 2, 1]) == (4, 2, 1)
    assert parse_value(grid, [4, "x", 1]) == parse_value(grid, "(4, 2)") == ()
    copy_kind = _arg(RecordKind.MEMCPY, "kind")
    assert parse_value(copy_kind, "HtoD") == parse_value(copy_kind, "1") == (1,)
    assert parse_value(_arg(RecordKind.MEMCPY, "GB/s"), 4.5) == ()  # derived, never stored
    peer = _arg(RecordKind.MEMCPY, "dst device")
    assert parse_value(peer, -1) == ()  # the exporters' "not a peer copy"
    assert parse_value(peer, 3) == (3,)


def test_find_prefers_the_exported_name_then_the_aliases() -> None:
    static = _arg(RecordKind.KERNEL, "static shared memory")
    assert find({"shared memory": 7}, static) == 7  # Kineto's total
    assert find({"static_smem": 5, "static shared memory": 9}, static) == 9
    src = _arg(RecordKind.MEMSET, "memory kind")
    assert find({"src_kind": "device"}, src) == "device"  # hand-written column names
    assert find({}, src) is None
