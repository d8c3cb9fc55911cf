"""The Perfetto trace's interned strings: names, categories, and the debug-annotation
string values (dims, labels, text) a chunk adds before its slices use them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from tfprof.collector.export.args import Dim3Codes
from tfprof.core.cupti_labels import Labels


@dataclass
class Interned:
    """Ids of the trace's interned strings, and the debug-annotation string values a
    chunk adds (they must be sent before the chunk's slices use them)."""

    categories: dict[str, int]
    annotation_names: dict[str, int]
    names: Sequence[str] = ()  # the timeline's names (MARKER categories are among them)
    strings: dict[str, int] = field(default_factory=dict)
    new_strings: list[tuple[int, str]] = field(default_factory=list)
    new_categories: list[tuple[int, str]] = field(default_factory=list)  # MARKERs' own
    dims: Dim3Codes = field(default_factory=Dim3Codes)
    _dim_iids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    _label_iids: dict[int, np.ndarray] = field(default_factory=dict)  # by id(Labels)

    def string_iid(self, value: str) -> int:
        iid = self.strings.get(value)
        if iid is None:
            iid = self.strings[value] = len(self.strings) + 1
            self.new_strings.append((iid, value))
        return iid

    def category_iid(self, name: str) -> int:
        iid = self.categories.get(name)
        if iid is None:
            iid = self.categories[name] = len(self.categories) + 1
            self.new_categories.append((iid, name))
        return iid

    def dim_iids(self, x: np.ndarray, y: np.ndarray, z: np.ndarray) -> np.ndarray:
        """The iid of each row's ``"(x, y, z)"``."""
        codes = self.dims.codes(x, y, z)
        done = self._dim_iids.shape[0]
        if done < len(self.dims.texts):
            new = [self.string_iid(t) for t in self.dims.texts[done:]]
            self._dim_iids = np.concatenate([self._dim_iids, np.array(new, dtype=np.int64)])
        iids: np.ndarray = np.take(self._dim_iids, codes)
        return iids

    def label_iids(self, labels: Labels, values: np.ndarray) -> np.ndarray:
        """The iid of each value's label (values CUPTI may add later: the fallback's)."""
        top = labels.max_value + 1  # the fallback's code
        codes = np.where((values >= 0) & (values < top), values, top)
        table = self._label_iids.setdefault(id(labels), np.zeros(top + 1, dtype=np.int64))
        used = np.bincount(codes, minlength=top + 1) > 0
        for code in np.flatnonzero(used & (table == 0)).tolist():
            text = labels.label(code) if code < top else labels.fallback
            table[code] = self.string_iid(text)
        iids: np.ndarray = np.take(table, codes)
        return iids

    def string_iids(self, texts: Sequence[str], index: np.ndarray) -> np.ndarray:
        """The iid of ``texts[index[i]]`` for each row."""
        iids = np.array([self.string_iid(t) for t in texts], dtype=np.int64)
        result: np.ndarray = iids[index] if iids.shape[0] else np.zeros(0, dtype=np.int64)
        return result
