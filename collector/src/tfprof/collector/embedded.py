"""The collector as ``tfprof-agent run`` embeds it: the agent's only door into the collector.

The launcher imports this module and nothing else of the collector, only when no remote
collector is named, so an agent installed without the collector (a training image) still
runs with ``--collector``.
"""

from __future__ import annotations

import os

from tfprof.collector.analysis.run_summary import short_summary
from tfprof.collector.errors import PathError
from tfprof.collector.export import SUFFIXES, UnknownFormatError, format_for, write_timeline
from tfprof.collector.lake.reader import open_jobs
from tfprof.collector.service.server import CollectorServer
from tfprof.collector.terminal import progress

# The trace file names the embedded collector can write, from the export registry.
OUTPUT_SUFFIXES: tuple[str, ...] = tuple(suffix for suffix, _ in SUFFIXES)


def check_output(output: str | os.PathLike[str], flag: str = "--output") -> None:
    """Raise (``InvalidArgument``, exit 2) unless a trace can be written to ``output``:
    a known suffix (or an existing directory, for xplane) in a writable directory.
    Called before the job starts, so a bad name never costs a run."""
    path = os.fspath(output)
    try:
        fmt = format_for(path)
    except UnknownFormatError as exc:  # its message lists the suffixes
        raise UnknownFormatError(f"{flag}: {exc}") from None
    where = path if fmt == "xplane" and os.path.isdir(path) else os.path.dirname(path) or "."
    if not os.path.isdir(where):
        raise PathError(f"{flag} {path}: directory {where} does not exist")
    if not os.access(where, os.W_OK | os.X_OK):
        raise PathError(f"{flag} {path}: directory {where} is not writable")


class EmbeddedCollector:
    """A real gRPC collector on 127.0.0.1 for one job, writing one trace file at the end."""

    def __init__(self, data_dir: str) -> None:
        self._data_dir = data_dir
        self._server = CollectorServer("127.0.0.1:0", data_dir)

    @property
    def data_dir(self) -> str:
        """Where the records are stored; ``tfprof-collector export --data-dir`` reads it."""
        return self._data_dir

    def start(self) -> str:
        """Start serving; the address the job's relay streams to."""
        self._server.start()
        return self._server.address

    @property
    def address(self) -> str:
        return self._server.address

    def stop(self, grace: float) -> None:
        """Stop accepting, drain open streams for up to ``grace`` seconds, flush the store."""
        self._server.stop(grace=grace)

    def write_trace(self, output: str | os.PathLike[str]) -> str:
        """Merge every stored job into one timeline at ``output``; the end-of-run summary.

        Read as ``export --data-dir`` and ``summary --data-dir`` read the same dir (the
        read engine, a time chunk at a time): the file and the figures are theirs, and
        memory is bounded by what overlaps in time, not by a process or the whole run."""
        from tfprof.collector.merged.streamed import streamed

        with progress("tfprof: placing the run's tracks"):
            jobs = open_jobs([self._data_dir]).jobs
            timeline = streamed(jobs, "job", None)
        with progress(f"tfprof: writing {os.fspath(output)}", unit="bytes") as advance:
            write_timeline(timeline, os.fspath(output), progress=advance)
        return short_summary(jobs, trace=output)
