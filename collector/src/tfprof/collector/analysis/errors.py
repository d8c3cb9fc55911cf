"""The analyses' one error: bad input to a view or rule (a filter, a field, a window)."""

from __future__ import annotations

from tfprof.collector.errors import InvalidArgument


class AnalysisError(InvalidArgument):
    """A view, field, filter or window that cannot be applied; the message says why."""
