"""Slice args as every exporter writes them: ``tfprof.core.slice_args``, a column at a time.

The table there says which args a slice of each kind carries, in which order, and how
each is written (``ArgType``); this module turns a selection of a track's slices into
one Python list per arg, formatting whole numpy columns at once, so the Chrome, Perfetto
and XPlane exporters write the same names and values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tfprof.collector.timeline.model import SliceTrack, widened
from tfprof.core.cupti_labels import PEER_COPY, Labels
from tfprof.core.slice_args import ArgType, SliceArg, args_of, format_dim3

# Label lookup tables, one per CUPTI enum; keyed by identity, as the enums are module-level
# constants of tfprof.core.cupti_labels (Labels holds dicts, so it is not hashable).
_LABEL_TABLES: dict[int, np.ndarray] = {}


def _label_table(labels: Labels) -> np.ndarray:
    table = _LABEL_TABLES.get(id(labels))
    if table is None:
        top = labels.max_value
        table = np.array([labels.label(v) for v in range(top + 2)], dtype=object)
        table[-1] = labels.fallback  # where out-of-range values land
        _LABEL_TABLES[id(labels)] = table
    return table


def label_column(labels: Labels, values: np.ndarray) -> list[str]:
    """Each value's label; values CUPTI may add later get the enum's fallback label."""
    table = _label_table(labels)
    last = table.shape[0] - 1
    result: list[str] = table[np.where((values >= 0) & (values < last), values, last)].tolist()
    return result


def dim3_distinct(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> tuple[list[str], np.ndarray]:
    """The distinct ``"(x, y, z)"`` texts and, per row, the index of its text."""
    if x.shape[0] == 0:
        return [], np.zeros(0, dtype=np.intp)
    small = (x.min() >= 0) & (x.max() < 1 << 31) & (y.min() >= 0) & (y.max() < 1 << 16)
    if small and z.min() >= 0 and z.max() < 1 << 16:
        key = (x << 32) | (y << 16) | z
        uniq, inverse = np.unique(key, return_inverse=True)
        text = [format_dim3(k >> 32, (k >> 16) & 0xFFFF, k & 0xFFFF) for k in uniq.tolist()]
    else:
        triples, inverse = np.unique(np.stack([x, y, z], axis=1), axis=0, return_inverse=True)
        text = [format_dim3(a, b, c) for a, b, c in triples.tolist()]
    return text, inverse.reshape(-1)


class Dim3Codes:
    """Launch dimensions as codes that stay the same from chunk to chunk (``texts[code]``
    is ``"(x, y, z)"``). The triples seen so far are kept sorted, so a chunk's codes are
    a binary search among a few keys, not a sort of the chunk."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self._code_of_text: dict[str, int] = {}
        self._keys = np.zeros(0, dtype=np.int64)  # packed (x, y, z), ascending
        self._codes = np.zeros(0, dtype=np.intp)  # the code of each key

    def _code(self, text: str) -> int:
        code = self._code_of_text.get(text)
        if code is None:
            code = self._code_of_text[text] = len(self.texts)
            self.texts.append(text)
        return code

    def codes(self, x: np.ndarray, y: np.ndarray, z: np.ndarray) -> np.ndarray:
        if x.shape[0] == 0:
            return np.zeros(0, dtype=np.intp)
        small = (x.min() >= 0) & (x.max() < 1 << 31) & (y.min() >= 0) & (y.max() < 1 << 16)
        if not (small and z.min() >= 0 and z.max() < 1 << 16):
            texts, inverse = dim3_distinct(x, y, z)
            found = np.array([self._code(t) for t in texts], dtype=np.intp)
            result: np.ndarray = found[inverse]
            return result
        key = (x << 32) | (y << 16) | z
        at = np.searchsorted(self._keys, key)
        known = self._keys.shape[0]
        hit = self._keys[np.minimum(at, known - 1)] == key if known else np.zeros(0, bool)
        if not known or not hit.all():
            new = np.unique(key if not known else key[~hit])
            codes = [self._code(format_dim3(k >> 32, (k >> 16) & 0xFFFF, k & 0xFFFF))
                     for k in new.tolist()]  # fmt: skip
            keys = np.concatenate([self._keys, new])
            order = np.argsort(keys, kind="stable")
            self._keys = keys[order]
            self._codes = np.concatenate([self._codes, np.array(codes, np.intp)])[order]
            at = np.searchsorted(self._keys, key)
        found_codes: np.ndarray = self._codes[at]
        return found_codes


def dim3_column(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> list[str]:
    """``"(x, y, z)"`` per row; formatted once per distinct triple, not once per row."""
    text, inverse = dim3_distinct(x, y, z)
    result: list[str] = np.array(text, dtype=object)[inverse].tolist()
    return result


def rate_thousandths(nbytes: np.ndarray, duration_ns: np.ndarray) -> np.ndarray:
    """GB/s (bytes per nanosecond) in thousandths, rounded as ``np.round(rate, 3)`` rounds
    (``rint(rate * 1000)``); 0 where the slice took no time (``has_rate`` says which)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        thousandths: np.ndarray = np.where(
            duration_ns > 0, np.rint(nbytes / duration_ns * 1000), 0
        ).astype(np.int64)
    return thousandths


def has_rate(duration_ns: np.ndarray) -> np.ndarray:
    """Where a slice has a rate: it took some time."""
    result: np.ndarray = duration_ns > 0
    return result


def rate_column(nbytes: np.ndarray, duration_ns: np.ndarray) -> list[float]:
    """GB/s (bytes per nanosecond) to 3 places; NaN where the slice took no time."""
    rate: list[float] = np.where(
        has_rate(duration_ns), rate_thousandths(nbytes, duration_ns) / 1000, np.nan
    ).tolist()
    return rate


def is_sparse(arg: SliceArg) -> bool:
    """Written only on the slices that have it (a peer copy's destination device, an
    API call's external id)."""
    return arg.type in (ArgType.PEER_DEVICE, ArgType.NONZERO)


def pick(values: np.ndarray, sel: np.ndarray | slice) -> np.ndarray:
    """``values[sel]``; a gather by ``np.take``, faster than indexing
    (bench/results/cpu-design-choices.txt, "gather")."""
    if isinstance(sel, slice):
        return values[sel]
    picked: np.ndarray = np.take(values, sel)
    return picked


class Selection:
    """Some slices of one track, each record column gathered once however often it is
    read (a copy's bytes make two args; its copy kind, a label and the peer test)."""

    def __init__(self, track: SliceTrack, sel: np.ndarray | slice) -> None:
        self.track = track
        self.sel = sel
        self.rows = pick(track.rows, sel)
        self.count = int(self.rows.shape[0])
        self._columns: dict[str, np.ndarray] = {}

    def column(self, name: str) -> np.ndarray:
        """A record column (``RECORD_COLUMNS``) for the selected slices."""
        values = self._columns.get(name)
        if values is None:
            values = self._columns[name] = widened(pick(self.track.records[name], self.rows))
        return values


@dataclass(frozen=True)
class ArgColumn:
    """One arg's values for a selection of slices.

    ``where`` is None when every slice has the arg (``values`` has one entry per slice);
    for a sparse arg it holds the positions, within the selection, of the slices that
    have it, and ``values`` one entry per position.
    """

    arg: SliceArg
    values: list[Any]
    where: np.ndarray | None = None


def arg_column(
    track: SliceTrack, arg: SliceArg, sel: np.ndarray | slice, duration_ns: np.ndarray
) -> ArgColumn:
    """``arg`` of the slices ``sel`` of ``track`` (``duration_ns``: theirs, for rates)."""
    columns = [track.column(c, sel) for c in arg.columns]
    if arg.type is ArgType.INT:
        return ArgColumn(arg, columns[0].tolist())
    if arg.type is ArgType.LABEL:
        assert arg.labels is not None  # the table gives every LABEL arg its labels
        return ArgColumn(arg, label_column(arg.labels, columns[0]))
    if arg.type is ArgType.DIM3:
        return ArgColumn(arg, dim3_column(*columns))
    if arg.type is ArgType.RATE:
        return ArgColumn(arg, rate_column(columns[0], duration_ns))
    if arg.type is ArgType.NONZERO:
        where = np.flatnonzero(columns[0] != 0)
        return ArgColumn(arg, columns[0][where].tolist(), where)
    # PEER_DEVICE: the copy kind says which slices have a destination device.
    where = np.flatnonzero(track.column("copy_kind", sel) == PEER_COPY)
    return ArgColumn(arg, columns[0][where].tolist(), where)


def arg_columns(track: SliceTrack, kind: int | None, sel: np.ndarray | slice) -> list[ArgColumn]:
    """Every arg of the slices ``sel`` (all of kind ``kind``), in the table's order."""
    duration = pick(track.duration_ns, sel)
    return [arg_column(track, arg, sel, duration) for arg in args_of(kind)]
