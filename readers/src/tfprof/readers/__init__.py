"""Readers of recorded trace files into columnar records, shared by ``replay:`` and imports.

One module per format: ``tf_timeline``, ``kineto``, ``tfprof_chrome`` (our Chrome export),
``perfetto`` and ``stepstats`` (our binary exports and TensorFlow's RunMetadata); ``trace``
holds what they share and ``load`` reads files. Standard library only at module level:
``replay:`` runs these readers inside user processes, and the packages the binary formats
need are imported only when such a file is read.
"""

from tfprof.core.errors import FormatUnavailable, TraceFormatError
from tfprof.readers.events import load_events
from tfprof.readers.load import load_trace, read_json_trace, read_trace
from tfprof.readers.trace import (
    FORMAT_KINETO,
    FORMAT_TF_TIMELINE,
    FORMAT_TFPROF,
    RecordedTrace,
)

__all__ = [
    "FORMAT_KINETO",
    "FORMAT_TFPROF",
    "FORMAT_TF_TIMELINE",
    "FormatUnavailable",
    "RecordedTrace",
    "TraceFormatError",
    "load_events",
    "load_trace",
    "read_json_trace",
    "read_trace",
]
