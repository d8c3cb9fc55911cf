"""``tfprof-collector top``: a live view of which job uses which GPU, read from the
collector's Prometheus endpoint (``serve --metrics-listen``).

``scrape`` reads and parses one exposition, ``snapshot`` turns two scrapes into rates,
rows, sorting and filtering, ``render`` writes a snapshot as a table or JSON, ``app`` is
the refreshing terminal view (textual).
"""
