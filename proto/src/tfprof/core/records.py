"""The record batch both sides share: ``RecordTable``, and the record vocabulary.

Imported inside every traced process (the hook builds ``RecordTable`` batches), so
standard library only. The kinds, columns and device fields are ``record_columns``'s
(offered here too); the collector stores and merges the same columns.
"""

from __future__ import annotations

import array
from collections.abc import Sequence
from typing import Any

from tfprof.core.record_columns import (
    COLUMN_INDEX,
    COLUMNS,
    NUM_COLUMNS,
    SYNC_NO_STREAM,
    DeviceInfo,
    RecordKind,
)

# GPU activity rows end with the host-side columns, all zero.
_HOST_ZEROS = (0,) * (NUM_COLUMNS - COLUMN_INDEX["thread"])


class RecordTable:
    """A columnar batch of GPU activity and host records, one int64 array per column.

    Sources either append record by record (``add_kernel`` and friends) or hand whole
    columns, in ``COLUMNS`` order, to the constructor (numpy arrays decoded from CUPTI
    buffers, replay chunks); ``from_columns`` takes them by name and zero-fills the rest.
    """

    __slots__ = ("columns",)

    def __init__(self, columns: Sequence[Any] | None = None) -> None:
        if columns is None:
            self.columns: list[Any] = [array.array("q") for _ in COLUMNS]
        else:
            if len(columns) != NUM_COLUMNS:
                raise ValueError(f"expected {NUM_COLUMNS} columns, got {len(columns)}")
            self.columns = list(columns)

    @classmethod
    def from_columns(cls, columns: dict[str, Any], length: int) -> RecordTable:
        """Columns by name (int64 buffers); missing columns are zero."""
        unknown = set(columns) - set(COLUMNS)
        if unknown:
            raise ValueError(f"unknown columns: {sorted(unknown)}")
        zeros = array.array("q", bytes(8 * length))
        cols = [columns.get(name, zeros) for name in COLUMNS]
        for name, col in zip(COLUMNS, cols):
            if len(col) != length:
                raise ValueError(f"column {name} has {len(col)} values, expected {length}")
        return cls(cols)

    def __len__(self) -> int:
        return len(self.columns[0])

    def append(self, values: Sequence[int]) -> None:
        if len(values) != len(self.columns):
            raise ValueError(f"{len(values)} values for {len(self.columns)} columns")
        for col, value in zip(self.columns, values):
            col.append(value)

    def add_kernel(
        self,
        *,
        start_ns: int,
        end_ns: int,
        device: int,
        stream: int,
        name: int,
        context: int = 0,
        correlation: int = 0,
        grid: tuple[int, int, int] = (0, 0, 0),
        block: tuple[int, int, int] = (0, 0, 0),
        registers: int = 0,
        static_smem: int = 0,
        dynamic_smem: int = 0,
    ) -> None:
        self.append(
            (
                RecordKind.KERNEL,
                start_ns,
                end_ns - start_ns,
                device,
                context,
                stream,
                correlation,
                name,
                *grid,
                *block,
                registers,
                static_smem,
                dynamic_smem,
                0,
                0,
                0,
                0,
                0,
                0,
                *_HOST_ZEROS,
            )
        )

    def add_memcpy(
        self,
        *,
        start_ns: int,
        end_ns: int,
        device: int,
        stream: int,
        nbytes: int,
        copy_kind: int,
        src_kind: int = 0,
        dst_kind: int = 0,
        context: int = 0,
        correlation: int = 0,
        dst_device: int = 0,
        name: int = 0,
    ) -> None:
        self.append(
            (
                RecordKind.MEMCPY,
                start_ns,
                end_ns - start_ns,
                device,
                context,
                stream,
                correlation,
                name,
                0, 0, 0, 0, 0, 0, 0, 0, 0,
                nbytes,
                copy_kind,
                src_kind,
                dst_kind,
                dst_device,
                0,
                *_HOST_ZEROS,
            )
        )  # fmt: skip

    def add_memset(
        self,
        *,
        start_ns: int,
        end_ns: int,
        device: int,
        stream: int,
        nbytes: int,
        memory_kind: int = 0,
        context: int = 0,
        correlation: int = 0,
        name: int = 0,
    ) -> None:
        self.append(
            (
                RecordKind.MEMSET,
                start_ns,
                end_ns - start_ns,
                device,
                context,
                stream,
                correlation,
                name,
                0, 0, 0, 0, 0, 0, 0, 0, 0,
                nbytes,
                0,
                memory_kind,
                0,
                0,
                0,
                *_HOST_ZEROS,
            )
        )  # fmt: skip

    def add_sync(
        self,
        *,
        start_ns: int,
        end_ns: int,
        device: int,
        stream: int,
        sync_type: int,
        context: int = 0,
        correlation: int = 0,
        name: int = 0,
    ) -> None:
        """A host wait; ``stream`` is ``SYNC_NO_STREAM`` for a context-wide one."""
        self.append(
            (
                RecordKind.SYNC,
                start_ns,
                end_ns - start_ns,
                device,
                context,
                stream,
                correlation,
                name,
                0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                sync_type,
                *_HOST_ZEROS,
            )
        )  # fmt: skip

    def add_api(
        self,
        *,
        start_ns: int,
        end_ns: int,
        thread: int,
        cbid: int,
        category: int,
        name: int,
        correlation: int = 0,
        return_value: int = 0,
        device: int = 0,
        context: int = 0,
    ) -> None:
        """A CUDA API call on a host thread; ``category`` 1 runtime, 2 driver
        (``cupti_labels.API_CATEGORIES``)."""
        self.append(
            (
                RecordKind.API,
                start_ns,
                end_ns - start_ns,
                device,
                context,
                0,
                correlation,
                name,
                0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                thread,
                cbid,
                return_value,
                0,
                0,
                0,
                category,
                0,
            )
        )  # fmt: skip

    def add_marker(
        self,
        *,
        start_ns: int,
        end_ns: int,
        thread: int,
        name: int,
        category: int = 0,
        external_id: int = 0,
        collective: int = 0,
    ) -> None:
        """A host range (NVTX, framework op); ``category`` is the string-table index of
        its domain, ``external_id`` its range id, ``collective`` that of the collective's
        arguments it issued. An instant has ``end_ns == start_ns``."""
        self.append(
            (
                RecordKind.MARKER,
                start_ns,
                end_ns - start_ns,
                0,
                0,
                0,
                0,
                name,
                0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                thread,
                0,
                0,
                external_id,
                0,
                0,
                category,
                collective,
            )
        )  # fmt: skip

    def add_memory(
        self,
        *,
        timestamp_ns: int,
        device: int,
        nbytes: int,
        address: int,
        memory_op: int,
        memory_kind: int = 0,
        context: int = 0,
        stream: int = 0,
        correlation: int = 0,
        thread: int = 0,
    ) -> None:
        """A device allocation (``memory_op`` 1) or release (2) at one instant;
        ``memory_kind`` (``cupti_labels.MEMORY_KINDS``) goes in ``src_kind``."""
        self.append(
            (
                RecordKind.MEMORY,
                timestamp_ns,
                0,
                device,
                context,
                stream,
                correlation,
                0,
                0, 0, 0, 0, 0, 0, 0, 0, 0,
                nbytes,
                0,
                memory_kind,
                0,
                0,
                0,
                thread,
                0,
                0,
                0,
                address,
                memory_op,
                0,
                0,
            )
        )  # fmt: skip

    def add_step(self, *, start_ns: int, end_ns: int, thread: int, step: int, name: int) -> None:
        """A training step of the process: number ``step`` ran from ``start_ns`` to
        ``end_ns`` on ``thread``; ``name`` is the string-table index of what marked it
        (``step_markers``). The number travels in ``external_id``."""
        self.append(
            (
                RecordKind.STEP,
                start_ns,
                end_ns - start_ns,
                0, 0, 0, 0,
                name,
                0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                thread,
                0,
                0,
                step,
                0,
                0,
                0,
                0,
            )
        )  # fmt: skip

    def column(self, name: str) -> Any:
        return self.columns[COLUMN_INDEX[name]]


__all__ = [
    "COLUMNS",
    "COLUMN_INDEX",
    "NUM_COLUMNS",
    "SYNC_NO_STREAM",
    "DeviceInfo",
    "RecordKind",
    "RecordTable",
]
