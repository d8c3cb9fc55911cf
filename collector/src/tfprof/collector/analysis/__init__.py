"""Summaries of collected GPU records: one analysis per module, pure functions over the
columnar ``RecordSet`` (record_set.py) or read engine needs, named as views by
``view_table``.

    rs = prepare(jobs, since_ns, until_ns)          # records.py
    report = view_report("kernels", rs, filters)    # view_table.py

Modules are imported where used (this package imports nothing): importing one analysis
loads that analysis, not every view's.
"""
