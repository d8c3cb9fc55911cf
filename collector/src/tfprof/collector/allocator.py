"""The process's allocators, tuned for reading large columns: glibc's malloc (numpy's
arrays) and Arrow's pool (Parquet's decoded buffers).

While a stream's columns are loaded whole (``LakeStream.loaded``: the timeline's
export), each column should be its own mapping, returned to the system when released
(``map_large_allocations``), and what the allocators hold free goes back once a
stream is released (``return_freed_memory``).
"""

from __future__ import annotations

import ctypes

import pyarrow as pa


def _libc() -> ctypes.CDLL | None:
    """glibc, for its allocator's knobs; None elsewhere: that allocator is left as it is."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


_LIBC = _libc()
# glibc's mallopt parameter (malloc.h).
_M_MMAP_THRESHOLD = -3
# Allocations of at least this many bytes get their own mapping, returned to the system
# when freed. 4 MiB: every column of a stream is mapped (held once, returned when it is
# released), while the many smaller temporaries reuse heap pages.
_MMAP_THRESHOLD_BYTES = 4 << 20


def map_large_allocations() -> None:
    """Stop glibc from raising its mmap threshold after large frees (up to 32 MiB):
    each stream's columns would then come from the heap and, fragmented by what is
    kept, stay resident after the stream is released."""
    if _LIBC is not None:
        _LIBC.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_BYTES)


def return_freed_memory() -> None:
    """Give what the allocators hold free back to the system."""
    pa.default_memory_pool().release_unused()
    if _LIBC is not None:  # the heap's free pages too, not only its top
        _LIBC.malloc_trim(0)


__all__ = ["map_large_allocations", "return_freed_memory"]
