"""The interface every tracer source implements, and what the hook offers them.

A source runs inside the user's process. It turns GPU activity into ``RecordTable``
batches and hands them to the hook through a ``Sink``; it never blocks the training
thread for long and never raises into user code: failures are reported once through
``Sink.warn`` and the source goes quiet.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from tfprof.core.records import DeviceInfo, RecordTable

if TYPE_CHECKING:
    from tfprof.agent.inprocess.stacks.code_capture import StackSink


class SourceUnavailable(Exception):
    """The source cannot run in this process; the message is the one line users see."""


class Sink(Protocol):
    def intern(self, name: str) -> int:
        """Index of ``name`` in the process's string table (0 is the empty name)."""
        ...

    def submit(self, table: RecordTable, wait: bool = False) -> bool:
        """Queue a batch for sending. False (and counted as dropped) when the queue is full.

        ``wait=True`` blocks until there is room (or the hook shuts down) instead of
        dropping; only sources running on their own thread (replay) may use it, never
        a callback that can stall the training thread (CUPTI).
        """
        ...

    def add_devices(self, devices: list[DeviceInfo]) -> None: ...

    def add_tracer_dropped(self, count: int) -> None:
        """Records the tracer itself lost (CUPTI's dropped-record count)."""
        ...

    def warn(self, message: str) -> None:
        """One line for the user, prefixed with ``tfprof:``; printed once per message."""
        ...

    def stack_sink(self) -> StackSink | None:
        """Where recorded Python stacks go (a replayed trace's); None: --code off."""
        ...


class Source(Protocol):
    name: str
    # How long before a capture window's edge the source wants ``set_capturing``: 0 for
    # one that acts at once (CUPTI); more for one that must know an edge before it
    # emits the records around it (replay).
    capture_lead_ns: int

    def start(self, sink: Sink, capturing: bool = True) -> None:
        """Arm the source. Raise ``SourceUnavailable`` with one clear line if it cannot.

        ``capturing=False`` arms it with nothing captured until ``set_capturing(True)``
        (the ``on-demand`` and ``periodic`` capture modes).
        """
        ...

    def set_capturing(self, on: bool, at_ns: int) -> None:
        """Open (``on``) or close a capture window at ``at_ns`` (host realtime clock).

        Called from the hook's capture thread, never from the training thread nor
        inside the source's own callbacks, ``capture_lead_ns`` before ``at_ns``, the
        window's edge (later when the thread was delayed; never dated before an edge
        already applied). Failures are reported through ``Sink.warn``, never raised.
        """
        ...

    def tracer_clock_ns(self) -> int | None:
        """The source's own clock now, if its timestamps are not host realtime."""
        ...

    def stop(self, deadline: float) -> None:
        """Deliver everything held to the sink by ``time.monotonic() >= deadline``."""
        ...
