"""The allocator phases (``tfprof.collector.allocator``) as glibc's malloc sees them:
where a block of several MiB comes from, in and out of ``reusing_large_blocks``.

Measured in a fresh interpreter: glibc serves a block from free heap space before it
maps one, so what earlier tests left free in this process's heap would decide it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tfprof.collector import allocator

pytestmark = pytest.mark.skipif(
    allocator._LIBC is None or not hasattr(allocator._LIBC, "mallinfo2"),
    reason="needs glibc 2.33 or later (mallinfo2)",
)

# Bytes malloc holds in blocks mapped on their own (mallinfo2's hblkhd) grown by a
# block of 8 MiB (over the usual 4 MiB mmap threshold, under the reusing one of 32 MiB)
# or 16 MiB (more than the heap has free after the 8 MiB one), at each step.
PROBE = """
import ctypes
import numpy as np
from tfprof.collector import allocator

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks",
                "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

allocator._LIBC.mallinfo2.restype = MallInfo2

def mapped_for(size):
    before = allocator._LIBC.mallinfo2().hblkhd
    block = np.ones(size, dtype=np.uint8)
    grown = allocator._LIBC.mallinfo2().hblkhd - before
    del block
    return grown

MiB = 1 << 20
allocator.map_large_allocations()
seen = [mapped_for(8 * MiB)]
with allocator.reusing_large_blocks():
    seen.append(mapped_for(8 * MiB))
    with allocator.reusing_heap():  # a pass inside it (the host pass) keeps it
        pass
    seen.append(mapped_for(16 * MiB))
seen.append(mapped_for(8 * MiB))
print(*(n // MiB for n in seen))
"""


def test_large_blocks_come_from_the_heap_only_inside_the_phase() -> None:
    run = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         timeout=120, check=True)  # fmt: skip
    outside, inside, after_nested, after = (int(n) for n in run.stdout.split()[-4:])
    assert outside >= 8 and after >= 8  # mapped on their own
    assert inside == 0 and after_nested == 0  # from the heap
