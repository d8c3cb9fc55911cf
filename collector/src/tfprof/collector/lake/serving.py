"""The lake as ``serve`` runs it: this data dir's lake and collector id, a compactor
listening to the store."""

from __future__ import annotations

from tfprof.collector.lake.compactor import Compactor
from tfprof.collector.lake.location import set_lake
from tfprof.collector.lake.segments import collector_id
from tfprof.collector.store import Store


def start_compactor(
    store: Store, lake_url: str, interval_s: float, empty_grace_s: float | None = None
) -> Compactor:
    """Compact ``store``'s streams into ``lake_url`` (empty: DATA_DIR/lake) from now on;
    with ``empty_grace_s``, also remove the streams that stored nothing that long."""
    from tfprof.collector.store.sweep import sweep_empty

    lake = set_lake(store.root, lake_url)
    sweep = None if empty_grace_s is None else (lambda: sweep_empty(store, empty_grace_s))
    every = 60.0 if empty_grace_s is None else min(60.0, max(0.5, empty_grace_s / 2))
    compactor = Compactor(store.root, lake, collector_id(store.root), interval_s, sweep, every)
    store.listener = compactor
    compactor.start()
    return compactor
