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

from tfprof.collector.store.datadir import Store

__all__ = ["Store"]
