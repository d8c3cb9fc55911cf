"""Code attribution inside the traced process: ``--code off|sample|launch``.

``CodeCapture`` owns the process's ``CodeTable``, its ``SampleBuffer``, the sampler
thread (``sample`` and ``launch``) and the CUPTI launch callbacks (``launch``, with the
cupti source). It sends what they gather as stacks frames through the hook
(``StackOutlet.submit_stacks``): new frames with their names interned in the stream's
string table, new stack nodes, samples, and the count of samples lost so far. Capture
windows switch the sampler and the callbacks with the source (``set_capturing``).

A replayed trace's recorded stacks come in through the same table (``StackSink``), so
one stream's ids never clash whatever made them.

Every failure of ours is one line on stderr (``warn``) and the job goes on: a sampler
that breaks stops sampling, callbacks that cannot subscribe leave the sampler running.
"""

from __future__ import annotations

import array
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Protocol

from tfprof.agent.inprocess.stacks.code_table import CodeTable, FrameInfo, Pending
from tfprof.agent.inprocess.stacks.launch_callbacks import LaunchCallbacks, LaunchCapture
from tfprof.agent.inprocess.stacks.sampler import StackSampler
from tfprof.agent.inprocess.stacks.samples import SampleBuffer
from tfprof.core.code_stacks import StackBatch

CODE_MODES = ("off", "sample", "launch")


class StackOutlet(Protocol):
    """What the hook offers code capture."""

    def intern(self, name: str) -> int: ...

    def submit_stacks(self, batch: StackBatch, wait: bool = False) -> bool:
        """Queue a stacks frame; False when it was dropped (the queue is full)."""
        ...

    def warn(self, message: str) -> None: ...


class StackSink(Protocol):
    """What a source that brings recorded stacks (replay) may use."""

    def intern_frame(self, info: FrameInfo) -> int: ...

    def intern_node(self, parent: int, frame: int) -> int: ...

    def add_samples(self, columns: list[array.array[int]]) -> None:
        """Samples as ``SAMPLE_COLUMNS``; waits for room rather than drop them."""
        ...


class CodeCapture:
    def __init__(
        self,
        outlet: StackOutlet,
        mode: str,
        hz: float,
        launch_every: int,
        redact: tuple[str, ...] = (),
    ) -> None:
        if mode not in CODE_MODES[1:]:
            raise ValueError(f"code capture mode {mode!r}")
        self.mode = mode
        self.outlet = outlet
        self.table = CodeTable(redact)
        self.buffer = SampleBuffer()
        self.stacks_sent = 0  # stacks frames queued
        self._flush_lock = threading.Lock()
        self._failed: set[str] = set()
        self.sampler = StackSampler(
            self.table, self.buffer, hz, self._flush_quietly, self._broke("the stack sampler")
        )
        self.launch: LaunchCapture | None = None
        self.callbacks: LaunchCallbacks | None = None
        if mode == "launch":
            self.launch = LaunchCapture(
                self.table, self.buffer, launch_every, self._broke("a launch stack")
            )
            self.callbacks = LaunchCallbacks(self.launch, outlet.warn)

    def _broke(self, what: str) -> Callable[[BaseException], None]:
        def report(exc: BaseException) -> None:
            if what in self._failed:
                return
            self._failed.add(what)
            self.outlet.warn(f"{what} failed ({type(exc).__name__}: {exc}); "
                             "later failures are not reported")  # fmt: skip

        return report

    def start(self, capturing: bool, cupti: ModuleType | None = None) -> None:
        """Start sampling (from the first window when not ``capturing``); with ``cupti``
        in launch mode, take launch stacks as well."""
        if self.callbacks is not None and cupti is not None:
            self.callbacks.bind(cupti)
        self.set_capturing(capturing)
        self.sampler.start()

    def set_capturing(self, on: bool) -> None:
        self.sampler.set_capturing(on)
        if self.callbacks is not None:
            self.callbacks.set_capturing(on)
        if not on:
            self.sampler.request_flush()  # the window's stacks leave with its records

    def stop(self, deadline_s: float) -> None:
        """Stop sampling and callbacks, send what is held (waiting for room)."""
        self.sampler.stop(min(1.0, deadline_s))
        if self.callbacks is not None:
            self.callbacks.set_capturing(False)
        self.flush(wait=True)

    # -- StackSink ----------------------------------------------------------------------

    def intern_frame(self, info: FrameInfo) -> int:
        return self.table.described_frame(info)

    def intern_node(self, parent: int, frame: int) -> int:
        return self.table.described_node(parent, frame)

    def add_samples(self, columns: list[array.array[int]]) -> None:
        while True:
            kept = self.buffer.extend(columns)
            if kept == len(columns[0]):
                return
            columns = [c[kept:] for c in columns]
            self.flush(wait=True)

    # -- what leaves ---------------------------------------------------------------------

    def _flush_quietly(self) -> None:
        self.flush(wait=False)
        if self.launch is not None:
            self.launch.forget_idle()

    def flush(self, wait: bool = False) -> bool:
        """Hand new frames, nodes and the samples held to the hook; False when the frame
        was dropped (its samples are counted, its frames and nodes go again next time)."""
        with self._flush_lock:
            pending = self.table.take_pending()
            samples = self.buffer.take()
            batch = self._batch(pending, samples)
            if batch.is_empty():
                return True
            if self.outlet.submit_stacks(batch, wait=wait):
                self.stacks_sent += 1
                return True
            self.table.restore_pending(pending.frame_base, pending.node_base)
            self.buffer.count_dropped(len(samples[0]))
            return False

    def _batch(self, pending: Pending, samples: list[array.array[int]]) -> StackBatch:
        batch = StackBatch(pending.frame_base, pending.node_base, self.buffer.dropped)
        intern = self.outlet.intern
        for path, line, function, first_line in pending.frames:
            batch.add_frame(intern(path), line, intern(function), first_line)
        for parent, frame in pending.nodes:
            batch.add_node(parent, frame)
        for column, values in zip(batch.samples.values(), samples):
            column.extend(values)
        return batch

    def sent_batch(self) -> StackBatch:
        """Every frame and node sent so far, no samples: what a new stream of this
        process needs first (a node daemon restarted); names were sent before."""
        return self._batch(self.table.sent(), [array.array("q") for _ in range(5)])
