"""The name ids a CUPTI record converter writes: kernel, API, NVTX range and domain names.

Every name becomes a string-table id of the sink, looked up by content, and for names
CUPTI keeps in place (kernels, domains) by pointer first, in a bounded cache.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any

from tfprof.agent.inprocess.sources.base import Sink
from tfprof.agent.inprocess.sources.cupti_api import ApiNames

if TYPE_CHECKING:
    import numpy as np

_MAX_NAME_POINTERS = 1 << 16  # bound on the kernel-name pointer cache


class NameIds:
    """The naming half of ``RecordConverter``, which sets the state declared here."""

    _sink: Sink
    _api_names: ApiNames
    _api_name_of: dict[int, int]
    _domain_by_ptr: dict[int, int]
    _names: dict[bytes, int]
    _name_by_ptr: dict[int, int]

    def _api_name_id(self, key: int) -> int:
        found = self._api_name_of.get(key)
        if found is None:
            name = self._api_names.name(key >> 32, key & 0xFFFFFFFF)
            found = self._api_name_of[key] = self._text_id(name.encode())
        return found

    def _marker_name_id(self, ptr: int) -> int:
        # Each range start carries its own copy of its name: read it every time (no
        # pointer cache, the address may be reused for another name).
        return self._text_id(ctypes.string_at(ptr)) if ptr else 0

    def _domain_id(self, ptr: int) -> int:
        # A domain's name lives as long as the domain, which NVTX keeps to the end.
        found = self._domain_by_ptr.get(ptr)
        if found is None:
            if len(self._domain_by_ptr) >= _MAX_NAME_POINTERS:
                self._domain_by_ptr = {0: 0}
            found = self._domain_by_ptr[ptr] = self._text_id(ctypes.string_at(ptr))
        return found

    def _text_id(self, raw: bytes) -> int:
        found = self._names.get(raw)
        if found is None:
            found = self._names[raw] = self._sink.intern(raw.decode("utf-8", "replace"))
        return found

    def _name_ids(self, pointers: np.ndarray) -> np.ndarray:
        # CUPTI points all records of one kernel at one shared name string, and the
        # strings stay put while CUPTI runs: look each distinct pointer up once, cached
        # by pointer (reading a C string costs about a microsecond), then by content.
        return self._map_distinct(pointers, self._name_id)

    @staticmethod
    def _map_distinct(values: np.ndarray, fn: Any) -> np.ndarray:
        """``fn`` of each value, called once per distinct value (a buffer holds few).
        A sort rather than np.unique, which imports numpy.ma on first use."""
        import numpy as np

        order = np.argsort(values)
        ordered = values[order]
        first = np.empty(len(ordered), dtype=bool)
        first[0] = True
        np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
        distinct = ordered[first].tolist()
        ids = np.array(list(map(fn, distinct)), dtype=np.int64)
        out = np.empty(len(ordered), dtype=np.int64)
        out[order] = ids[np.cumsum(first) - 1]
        return out

    def _name_id(self, ptr: int) -> int:
        by_ptr = self._name_by_ptr
        found = by_ptr.get(ptr)
        if found is None:
            raw = ctypes.string_at(ptr) if ptr else b""
            found = self._names.get(raw)
            if found is None:
                found = self._names[raw] = self._sink.intern(raw.decode("utf-8", "replace"))
            if len(by_ptr) >= _MAX_NAME_POINTERS:
                by_ptr.clear()
            by_ptr[ptr] = found
        return found

    def _intern_text(self, text: str) -> int:
        return self._text_id(text.encode()) if text else 0
