"""Reading trace files for import, and placing them in time (``--shift``).

``load_files`` reads each file into columnar records (``tfprof.readers.read_trace``);
``shifts`` gives each the nanoseconds to add to its own clock, by the modes and rules
the ``importer`` module describes; ``ranked_files`` tells whether the files are the
ranks of one distributed job.
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from tfprof.collector.errors import InvalidArgument, NotFound, PathError
from tfprof.collector.timespec import parse_duration
from tfprof.readers import RecordedTrace, TraceFormatError, read_trace

SHIFT_MODES = ("auto", "none", "to-first", "consecutive")


@dataclass
class Loaded:
    path: str
    trace: RecordedTrace
    ranked: bool = False  # stored as the task of its rank (``ranked_files``)

    @property
    def identity(self) -> frozenset[tuple[str, str]] | None:
        """The (job, task) pairs the file names, None for a file that names none."""
        if self.trace.tasks:
            return frozenset(self.trace.tasks)
        if self.ranked:
            return frozenset({("", self.task)})
        return None

    @property
    def task(self) -> str:
        """The task a ranked file is stored as: its rank."""
        return str(self.trace.rank)

    @property
    def start(self) -> int:
        return self.trace.origin_ns

    @property
    def end(self) -> int:
        return self.trace.origin_ns + self.trace.span_ns


def ranked_files(files: Sequence[Loaded]) -> bool:
    """Whether ``files`` are ranks of a distributed job: every one names its rank (and
    none names its own tasks); marks them so."""
    ranked = all(f.trace.rank is not None and not f.trace.tasks for f in files)
    for f in files:
        f.ranked = ranked
    return ranked


@contextlib.contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """Reading a trace makes millions of acyclic objects, some kept until the end (a TF
    timeline's GPU events wait for their twins): the cycle collector would walk them
    again and again and free nothing. Paused, then
    restored, in this process only (the CLI's, not a traced job's)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def load_files(paths: Sequence[str | os.PathLike[str]]) -> list[Loaded]:
    if not paths:
        raise InvalidArgument("no trace files given")
    loaded = []
    for path in paths:
        where = os.fspath(path)
        if not os.path.exists(where):
            raise NotFound(f"no such trace file: {where}")
        try:
            with _no_cycle_collection():
                loaded.append(Loaded(where, read_trace(where)))
        except TraceFormatError as exc:
            raise InvalidArgument(str(exc)) from None
        except OSError as exc:  # exists, but a directory, unreadable, ...
            raise PathError.from_os("trace file", where, exc) from exc
    return loaded


def shifts(files: Sequence[Loaded], mode: str, sequential: bool) -> list[int]:
    """Nanoseconds to add to each file's own clock; ``sequential``: files are steps."""
    if mode not in SHIFT_MODES:
        return [parse_duration(mode)] * len(files)
    if mode == "auto":
        if sequential:
            mode = "consecutive" if _steps_overlap(files) else "none"
        else:
            overlap, latest_end = False, None
            for start, end in sorted((f.start, f.end) for f in files):
                overlap = overlap or (latest_end is not None and start < latest_end)
                latest_end = end if latest_end is None else max(latest_end, end)
            mode = "none" if overlap or len(files) < 2 else "to-first"
    if mode == "none":
        return [0] * len(files)
    if mode == "to-first":
        return [files[0].start - f.start for f in files]
    out, cursor = [], files[0].start
    for f in files:
        out.append(cursor - f.start)
        cursor += f.end - f.start
    return out


def _steps_overlap(files: Sequence[Loaded]) -> bool:
    """Whether two files that would share tracks as steps overlap in time: files naming
    no task, or the same (job, task). Files of different tasks (the ranks of one job,
    each recorded on its own) ran side by side, not one after the other."""
    for i, a in enumerate(files):
        for b in files[i + 1 :]:
            shared = a.identity is None and b.identity is None
            if a.identity is not None and b.identity is not None:
                shared = bool(a.identity & b.identity)
            if shared and a.start < b.end and b.start < a.end:
                return True
    return False
