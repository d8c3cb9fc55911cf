"""The allocator phases (``tfprof.collector.allocator``) as glibc's malloc sees them:
where a block of several MiB comes from, in and out of ``reusing_large_blocks``."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from tfprof.collector import allocator

pytestmark = pytest.mark.skipif(
    allocator._LIBC is None or not hasattr(allocator._LIBC, "mallinfo2"),
    reason="needs glibc 2.33 or later (mallinfo2)",
)

_BLOCK = 8 << 20  # over the usual 4 MiB mmap threshold, under the reusing one (32 MiB)


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost",
    )]  # fmt: skip


def _mapped_bytes() -> int:
    """Bytes malloc holds in blocks mapped on their own (``hblkhd``)."""
    assert allocator._LIBC is not None
    allocator._LIBC.mallinfo2.restype = _MallInfo2
    return int(allocator._LIBC.mallinfo2().hblkhd)


def _mapped_for_a_block(size: int = _BLOCK) -> int:
    before = _mapped_bytes()
    block = np.ones(size, dtype=np.uint8)
    grown = _mapped_bytes() - before
    del block
    return grown


def test_large_blocks_come_from_the_heap_only_inside_the_phase() -> None:
    allocator.map_large_allocations()
    assert _mapped_for_a_block() >= _BLOCK
    with allocator.reusing_large_blocks():
        assert _mapped_for_a_block() == 0
        with allocator.reusing_heap():  # a pass inside it (the host pass) keeps it
            pass
        # Larger than what the heap has free: served from the heap all the same.
        assert _mapped_for_a_block(2 * _BLOCK) == 0
    assert _mapped_for_a_block() >= _BLOCK
