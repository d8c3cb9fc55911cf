"""The lake as ``serve`` runs it: this data dir's lake and collector id, a compactor
listening to the store."""

from __future__ import annotations

from tfprof.collector.lake.compactor import Compactor
from tfprof.collector.lake.location import set_lake
from tfprof.collector.lake.segments import collector_id
from tfprof.collector.store import Store


def start_compactor(store: Store, lake_url: str, interval_s: float) -> Compactor:
    """Compact ``store``'s streams into ``lake_url`` (empty: DATA_DIR/lake) from now on."""
    lake = set_lake(store.root, lake_url)
    compactor = Compactor(store.root, lake, collector_id(store.root), interval_s)
    store.listener = compactor
    compactor.start()
    return compactor
