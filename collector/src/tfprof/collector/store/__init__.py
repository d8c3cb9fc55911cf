"""On-disk storage of ingested streams, and loading them back as columnar jobs.

Layout under the data dir (names are checked by ``tfprof.core.names`` before they reach
a path)::

    jobs/<job>/<run_id>/<stream_id>/hello.pb      the stream's Hello
    jobs/<job>/<run_id>/<stream_id>/batches.log   u32 length + Batch, appended per batch
    jobs/<job>/<run_id>/<stream_id>/goodbye.pb    present once the stream ended cleanly
    jobs/<job>/<run_id>/<stream_id>/summary.json  counts and time range of a log prefix

Modules: ``datadir`` (``Store``, the data dir as a whole), ``writer`` (appending a
stream: durability, duplicates, the stream lock), ``summary`` (the cached counts),
``catalog`` (runs, their counts and states), ``loader`` (a stream as ``StreamData``),
``files`` (atomic replaces, locks, sizes).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tfprof.collector.store.datadir import Store

__all__ = ["Store"]


def __getattr__(name: str) -> object:
    # ``Store`` on first use: what imports a helper of this package (``files``,
    # ``traced_windows``: the lake's readers) loads no data dir machinery and no protobuf.
    if name == "Store":
        from tfprof.collector.store.datadir import Store

        return Store
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
