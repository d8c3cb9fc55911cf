"""The process's allocators, tuned for reading large columns: glibc's malloc (numpy's
arrays) and Arrow's pool (Parquet's decoded buffers).

Two phases want opposite settings. While a stream's columns are loaded whole, each
column should be its own mapping, returned to the system when released
(``map_large_allocations``). While the host side streams past in batches, the same
sizes are made and freed batch after batch, and reusing the heap's pages beats
faulting in fresh ones for every batch (``reusing_heap``: on this project's machine a
page fault costs 2-4 us; advise's host pass over 10M records made 240,000 of them, 1.1
s of its 1.9 s in the kernel, and 70,000 when it reuses the heap).
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Iterator

import pyarrow as pa


def _libc() -> ctypes.CDLL | None:
    """glibc, for its allocator's knobs; None elsewhere: that allocator is left as it is."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


_LIBC = _libc()
# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# Allocations of at least this many bytes get their own mapping, returned to the system
# when freed. 4 MiB: every column of a stream is mapped (held once, returned when it is
# released), while the many smaller temporaries of the analyses reuse heap pages
# (1 MiB: advise over 10M records spent 2.4 s of its 6 s in the kernel, 4 MiB: 1.1 of
# 4.2).
_MMAP_THRESHOLD_BYTES = 4 << 20
_TRIM_THRESHOLD_BYTES = 128 << 10  # glibc's default
# While reusing the heap, up to this much free memory stays at its top. (Raising the mmap
# threshold as well, so that a batch's columns came from the heap, saved no more time
# and held 150 MiB more at 100M records.)
_REUSE_TRIM_THRESHOLD_BYTES = 64 << 20
# While reusing large blocks too (``reusing_large_blocks``), blocks up to this size come
# from the heap (as far as glibc's own adjustment ever raises the threshold on 64-bit),
# and this much free stays at its top.
_LARGE_MMAP_THRESHOLD_BYTES = 32 << 20
_LARGE_TRIM_THRESHOLD_BYTES = 256 << 20
_reusing = 0  # phases inside ``reusing_heap`` (threads of one pass share it)
_mmap_set = False  # the first of them set the mmap threshold


def map_large_allocations() -> None:
    """Stop glibc from raising its mmap threshold after large frees (up to 32 MiB):
    each stream's columns would then come from the heap and, fragmented by what the
    table keeps, stay resident after the stream is released (measured: +50% peak RSS
    over 10M records)."""
    if _LIBC is not None:
        _LIBC.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_BYTES)


def return_freed_memory() -> None:
    """Give what the allocators hold free back to the system (not while a phase reuses
    the heap: it would fault it back in)."""
    if _reusing:
        return
    pa.default_memory_pool().release_unused()
    if _LIBC is not None:  # the heap's free pages too, not only its top
        _LIBC.malloc_trim(0)


def reusing_heap() -> contextlib.AbstractContextManager[None]:
    """A phase that allocates and frees the same sizes over and over (batches): what it
    frees stays with the process (Arrow's pool, up to 64 MiB at the heap's top) for
    the next batch until the phase ends, then goes back (``return_freed_memory``)."""
    return _reusing_phase(_REUSE_TRIM_THRESHOLD_BYTES, None)


def reusing_large_blocks() -> contextlib.AbstractContextManager[None]:
    """``reusing_heap`` for the analyses' temporaries of several MiB as well (sorts and
    searches over a few million intervals): they come from the heap and are reused
    rather than mapped, faulted in and unmapped each time. Only where what the phase
    holds is small next to its memory bound: freed blocks stay with the process until
    it ends (advise over 10M records: 0.57 s in the kernel against 0.92, 611 MiB peak
    against 547)."""
    return _reusing_phase(_LARGE_TRIM_THRESHOLD_BYTES, _LARGE_MMAP_THRESHOLD_BYTES)


@contextlib.contextmanager
def _reusing_phase(trim: int, mmap: int | None) -> Iterator[None]:
    """glibc's thresholds set when the first phase begins (phases nest, and threads of
    one pass share one) and put back, and what was freed returned, when the last ends."""
    global _reusing, _mmap_set
    if not _reusing:
        _mmap_set = mmap is not None
        if _LIBC is not None:
            _LIBC.mallopt(_M_TRIM_THRESHOLD, trim)
            if mmap is not None:
                _LIBC.mallopt(_M_MMAP_THRESHOLD, mmap)
    _reusing += 1
    try:
        yield
    finally:
        _reusing -= 1
        if not _reusing:
            if _LIBC is not None:
                _LIBC.mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD_BYTES)
                if _mmap_set:
                    _LIBC.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_BYTES)
            return_freed_memory()


__all__ = ["map_large_allocations", "return_freed_memory", "reusing_heap", "reusing_large_blocks"]
