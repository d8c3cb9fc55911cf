"""What a slice is called on the timeline, as tf.timeline called GPU activity.

Kernels by their name, copies ``MEMCPY<kind>`` (``MEMCPYHtoD``), memsets ``MEMSET``, and
syncs by their own name (Kineto's "Event Sync") or else their sync type's label
(``StreamSynchronize``). Records with no usable name get a placeholder.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tfprof.collector.timeline.prepare import NameTable
from tfprof.core.cupti_labels import COPY_KINDS, SYNC_TYPES
from tfprof.core.records import RecordKind

MEMCPY_PREFIX = "MEMCPY"
MEMSET_NAME = "MEMSET"
UNNAMED_KERNEL = "unnamed kernel"
UNKNOWN_ACTIVITY = "unknown activity"


def slice_name_ids(
    names: NameTable,
    strings: Sequence[str],
    kind: np.ndarray,
    name: np.ndarray,
    copy_kind: np.ndarray,
    sync_type: np.ndarray,
) -> np.ndarray:
    """The timeline name id (into ``names``) of each record, given its columns."""
    ids = names.intern_column(strings, name, unnamed=-1)
    unnamed = ids < 0
    if unnamed.any():
        is_kernel = kind == RecordKind.KERNEL
        ids[unnamed & is_kernel] = names.intern(UNNAMED_KERNEL)
        ids[unnamed & ~is_kernel] = names.intern(UNKNOWN_ACTIVITY)
    copies = kind == RecordKind.MEMCPY
    if copies.any():
        top = COPY_KINDS.max_value
        copy_names = [names.intern(MEMCPY_PREFIX + COPY_KINDS.label(k)) for k in range(top + 1)]
        table = np.array(copy_names, dtype=np.int32)
        ck = copy_kind[copies]
        ids[copies] = table[np.where((ck >= 0) & (ck <= top), ck, 0)]
    memsets = kind == RecordKind.MEMSET
    if memsets.any():
        ids[memsets] = names.intern(MEMSET_NAME)
    valid = (name > 0) & (name < len(strings))
    unnamed_syncs = np.flatnonzero(~valid & (kind == RecordKind.SYNC))
    if unnamed_syncs.shape[0]:
        types = sync_type[unnamed_syncs]
        for value in np.unique(types).tolist():
            ids[unnamed_syncs[types == value]] = names.intern(SYNC_TYPES.label(int(value)))
    return ids
