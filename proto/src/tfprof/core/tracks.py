"""Track identity: the one place a timeline track's TensorFlow-style name is built and parsed.

A record belongs to (job, task, device, stream). The timeline shows it on a pseudo-device
track named as TensorFlow's GPU tracer named them, qualified by job and task:

- ``/job:J/task:T/gpu:N/stream:M``: kernels, memsets, syncs and copies on stream M;
- ``/job:J/task:T/gpu:N/stream:none``: context-wide synchronisations (CUPTI reports
  ``CUPTI_SYNCHRONIZATION_INVALID_VALUE``, our ``SYNC_NO_STREAM``, as their stream);
- ``/job:J/task:T/gpu:N/memcpy``: every copy, a second time, as tf.timeline did;
- ``/job:J/task:T/cpu``: the task's host counters (and device-memory counters);
- ``/job:J/task:T/cpu/thread:TID``: one host thread of the task: its CUDA API calls and
  its ranges (NVTX, framework ops, annotations), TID being the OS thread id.

Older exports wrote the context-wide stream as ``stream:4294967295``; ``parse`` still
reads that spelling, ``format`` never writes it.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from tfprof.core.errors import InputError
from tfprof.core.records import SYNC_NO_STREAM

_NO_STREAM_LABEL = "none"
_PATTERN = re.compile(
    r"/job:(?P<job>[^/]+)/task:(?P<task>[^/]+)/"
    r"(?:(?P<cpu>cpu)(?:/thread:(?P<thread>\d+))?"
    r"|gpu:(?P<gpu>\d+)/(?:stream:(?P<stream>\d+|none)|(?P<memcpy>memcpy)))"
)


class TrackKeyError(InputError):
    """A string is not a track name of the form ``format`` writes."""


class TrackKind(enum.Enum):
    STREAM = "stream"
    MEMCPY = "memcpy"
    CPU = "cpu"
    THREAD = "thread"


# No slots=True: the in-process hook imports this on Python 3.9 too.
@dataclass(frozen=True, order=True)
class TrackKey:
    """One timeline track. Build with ``stream``/``memcpy``/``cpu``; never by hand-made strings."""

    job: str
    task: str
    kind: TrackKind
    gpu: int = 0
    stream: int = 0
    thread: int = 0

    @classmethod
    def for_stream(cls, job: str, task: str, gpu: int, stream: int) -> TrackKey:
        return cls(job, task, TrackKind.STREAM, gpu, stream)

    @classmethod
    def for_memcpy(cls, job: str, task: str, gpu: int) -> TrackKey:
        return cls(job, task, TrackKind.MEMCPY, gpu)

    @classmethod
    def for_cpu(cls, job: str, task: str) -> TrackKey:
        return cls(job, task, TrackKind.CPU)

    @classmethod
    def for_thread(cls, job: str, task: str, thread: int) -> TrackKey:
        return cls(job, task, TrackKind.THREAD, thread=thread)

    @property
    def is_host(self) -> bool:
        """A track of the task's host (counters or a thread), not of a GPU."""
        return self.kind is TrackKind.CPU or self.kind is TrackKind.THREAD

    @property
    def task_prefix(self) -> str:
        """``/job:J/task:T``: the part every track of one task shares."""
        return f"/job:{self.job}/task:{self.task}"

    @property
    def device_prefix(self) -> str:
        """``/job:J/task:T/gpu:N`` (``/job:J/task:T/cpu`` for a host track)."""
        if self.is_host:
            return f"{self.task_prefix}/cpu"
        return f"{self.task_prefix}/gpu:{self.gpu}"

    @property
    def stream_label(self) -> str:
        """What follows ``stream:``: the number, or ``none`` for context-wide records."""
        return _NO_STREAM_LABEL if self.stream == SYNC_NO_STREAM else str(self.stream)

    def format(self) -> str:
        if self.kind is TrackKind.CPU:
            return f"{self.task_prefix}/cpu"
        if self.kind is TrackKind.THREAD:
            return f"{self.task_prefix}/cpu/thread:{self.thread}"
        if self.kind is TrackKind.MEMCPY:
            return f"{self.device_prefix}/memcpy"
        return f"{self.device_prefix}/stream:{self.stream_label}"

    def __str__(self) -> str:
        return self.format()

    @classmethod
    def parse(cls, text: str) -> TrackKey:
        """The inverse of ``format``; ``TrackKeyError`` for anything else."""
        m = _PATTERN.fullmatch(text)
        if m is None:
            raise TrackKeyError(f"not a tfprof track name: {text!r}")
        job, task = m.group("job"), m.group("task")
        if m.group("thread"):
            return cls.for_thread(job, task, int(m.group("thread")))
        if m.group("cpu"):
            return cls.for_cpu(job, task)
        gpu = int(m.group("gpu"))
        if m.group("memcpy"):
            return cls.for_memcpy(job, task, gpu)
        label = m.group("stream")
        stream = SYNC_NO_STREAM if label == _NO_STREAM_LABEL else int(label)
        return cls.for_stream(job, task, gpu, stream)

    @classmethod
    def search(cls, text: str) -> TrackKey | None:
        """The first track name inside ``text`` (e.g. a process name with a suffix), if any."""
        m = _PATTERN.search(text)
        return None if m is None else cls.parse(m.group(0))
