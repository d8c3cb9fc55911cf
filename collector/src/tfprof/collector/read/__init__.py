"""The read engine: one path from the lake to every view, rule and export, with memory
bounded by what overlaps in time, never by a process's records.

A view, rule or export declares what it needs (``needs.Need``: SQL ``Query`` values
and interval ``Sweep`` values); ``engine.read`` runs every query in one DuckDB
connection, then one time-ordered pass over the records feeding every sweep, and hands
each need what it declared (``needs.Got``).

- ``refs``: jobs, processes and GPUs as every output names them;
- ``shared_gpus``: which processes share a GPU, and a key per GPU before they are listed;
- ``lake_catalog``: what a read covers, from the lake's small tables and footers;
- ``clipped_sql``: the records as DuckDB relations clipped to the window (``g``, ``h``);
- ``time_chunks``: the records in start order, a chunk at a time (row groups and log
  tails as runs of a merge);
- ``carried_unions``: unions, gaps and cover over chunks, with carried state;
- ``gpu_sweeps``: the interval pieces the GPU views and rules share;
- ``needs``: the declaration API; ``engine``: the driver.

Modules are imported where used (this package imports nothing): a command that does
not read records (``jobs``, ``sql``) never imports the engine.
"""
