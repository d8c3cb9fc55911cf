"""Summaries of collected GPU records: one analysis per module, each a read engine need
(``tfprof.collector.read``: the SQL and sweeps it reads, and how its rows are built),
named as views by ``view_table``.

    cat = catalog(jobs, TimeWindow(since_ns, until_ns))   # read/lake_catalog.py
    report = read_view_report("kernels", cat, filters)     # view_table.py

Modules are imported where used (this package imports nothing): importing one analysis
loads that analysis, not every view's.
"""
