"""A trace file (embedded mode's output, an export, a Kineto or TF timeline) as a job.

Files are read and turned into streams by the importer (``collector.importer``), like
``import`` and ``merge`` do; a file is one job with one process, on its own clock. An
export of several jobs keeps their GPUs apart (each (job, task, gpu) is its own device)
but not their names.
"""

from __future__ import annotations

import os

from tfprof.collector.importer import job_name, load_files, stream_from
from tfprof.collector.model import JobData


def job_from_trace(path: str | os.PathLike[str]) -> JobData:
    (loaded,) = load_files([path])
    name = job_name(loaded.path)
    stream = stream_from(loaded, name, "file", "0", 0, 0)
    # Files carry no GPU UUIDs: name the GPUs after the file so two files' GPU 0 are not
    # taken for one physical GPU.
    stream.host = name
    return JobData(name=name, run_id="file", streams=[stream])
