"""A task's launch flows and op attribution: its records as one table, ops onto slices."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from tfprof.collector.timeline.attribution import HOW_NONE, OpAttribution
from tfprof.collector.timeline.flows import LaunchLinks, is_launched
from tfprof.collector.timeline.merge_tasks import MergeTask, NamedSource
from tfprof.collector.timeline.model import SliceTrack
from tfprof.collector.timeline.prepare import NameTable


def task_records(task: MergeTask, names: NameTable) -> tuple[dict[str, np.ndarray], list[str]]:
    """The task's kept rows as one table for ``attribute_ops``, with names as strings.

    Names become timeline name ids + 1 (0: no name), so every source of the task (a
    reconnected process) shares one string table: ``("", *names)``.
    """
    cols: dict[str, list[np.ndarray]] = {c: [] for c in ATTRIBUTION_COLUMNS}
    for source in task.sources:
        prep = source.prep
        cols["kind"].append(source.kind)
        cols["start_ns"].append(prep.start)
        cols["duration_ns"].append(prep.end - prep.start)
        cols["name"].append(source.name.astype(np.int64) + 1)
        category = source.category  # -1 off MARKER rows, as for no name
        cols["category"].append(
            np.zeros(len(prep), np.int64) if category is None else category.astype(np.int64) + 1
        )
        for c in ("thread", "correlation", "external_id"):
            cols[c].append(prep.column(c))
    # One source (the rule): its columns as they are, not copied.
    table = {c: v[0] if len(v) == 1 else np.concatenate(v) for c, v in cols.items()}
    return table, ["", *names.names]


ATTRIBUTION_COLUMNS = (
    "kind", "start_ns", "duration_ns", "name", "category", "thread", "correlation", "external_id",
)  # fmt: skip


def place_ops(
    attribution: OpAttribution,
    records: Mapping[str, np.ndarray],
    track: np.ndarray,
    index: np.ndarray,
    slices: Sequence[SliceTrack],
) -> None:
    """Write each attributed GPU record's range name into its stream track's ``op_id``."""
    ok = attribution.marker >= 0
    gpu, marker = attribution.gpu[ok], attribution.marker[ok]
    op_name = records["name"][marker] - 1
    where = track[gpu]
    for t in np.unique(where[where >= 0]).tolist():
        op_ids = slices[t].op_id
        if op_ids is not None:
            mine = where == t
            op_ids[index[gpu[mine]]] = op_name[mine]


def unlinked_attribution(sources: Sequence[NamedSource]) -> OpAttribution:
    """What ``attribute_ops`` finds for records without API calls or MARKERs: no link
    (GPU records with correlation 0 are unknown, the others miss their API call) and no
    op; only the counts are filled in."""
    launched = unknown = 0
    for source in sources:
        gpu = is_launched(source.kind)
        launched += int(np.count_nonzero(gpu))
        unknown += int(np.count_nonzero(gpu & (source.prep.column("correlation") == 0)))
    none = np.zeros(0, dtype=np.int64)
    links = LaunchLinks(none, none, unknown, launched - unknown, 0)
    return OpAttribution(none, none, np.full(launched, HOW_NONE, dtype=np.int64), links)
