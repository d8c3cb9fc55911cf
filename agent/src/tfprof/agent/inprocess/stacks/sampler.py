"""The sampler thread: every period, the Python stack of every other thread of the process.

One daemon thread reads ``sys._current_frames()`` and walks each thread's frames afresh
(``CodeTable.stack_of``); it keeps no frame between ticks, and skips the agent's own
threads. A sample's time is taken once per tick on the host realtime clock, as host
samples are. The same thread runs the process's stack flushes (``flush``, every
``FLUSH_S`` or sooner when asked) and governs its own cost: over each ``GOVERN_S`` it
reads its thread CPU time, halves its rate (down to ``MIN_HZ``) while that exceeds
``CPU_BUDGET`` of one core, and goes back up towards the configured rate when well under.

Against a CPU-bound pure-Python thread a tick waits for the GIL (the switch interval,
5 ms): the rate achieved is then lower than asked, the times stay exact.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable

from tfprof.agent.inprocess import clock
from tfprof.agent.inprocess.stacks.code_table import CodeTable
from tfprof.agent.inprocess.stacks.samples import SampleBuffer, ThreadIds
from tfprof.core.code_stacks import StackKind

FLUSH_S = 1.0  # stacks leave at least this often while the process runs
GOVERN_S = 2.0  # the window over which the sampler judges its own CPU use
CPU_BUDGET = 0.01  # of one core: above it the rate halves
MIN_HZ = 5.0


class StackSampler:
    def __init__(
        self,
        table: CodeTable,
        buffer: SampleBuffer,
        hz: float,
        flush: Callable[[], None],
        on_error: Callable[[BaseException], None],
    ) -> None:
        self.table = table
        self.buffer = buffer
        self.hz = hz  # the configured rate
        self.period = 1.0 / hz
        self.capturing = False  # switched by capture windows; ticks only while True
        self.ticks = 0
        self.slowed = 0  # how often the budget halved the rate
        self._flush = flush
        self._on_error = on_error
        self._threads = ThreadIds()
        self._stop = threading.Event()
        self._wake = threading.Event()  # a flush asked for before its time
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        thread = threading.Thread(target=self._run, name="tfprof-stacks", daemon=True)
        thread.start()
        self._thread = thread

    def request_flush(self) -> None:
        self._wake.set()

    def stop(self, timeout: float) -> None:
        """End the thread (its last flush is the caller's to make)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(max(0.0, timeout))

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def tick(self, skip: int) -> int:
        """One sample of every thread but ``skip`` and the agent's own; how many."""
        now = clock.now_ns()
        frames = sys._current_frames()
        # The dict holds this very frame, which holds the dict: a cycle that would keep
        # every thread's frames (and their locals) alive until the cyclic GC ran. Empty it
        # however this ends.
        try:
            threads = self._threads
            own = threads.own
            taken = 0
            for ident, top in frames.items():
                if ident == skip or ident in own:
                    continue
                stack = self.table.stack_of(top)
                if self.buffer.add(now, threads.native(ident), stack, 0, StackKind.SAMPLE):
                    taken += 1
            self.ticks += 1
            return taken
        finally:
            frames.clear()

    def _run(self) -> None:
        me = threading.get_ident()
        self._threads.refresh()
        cpu0, wall0 = time.thread_time(), time.monotonic()
        due = wall0 + self.period
        flush_due = wall0 + FLUSH_S
        try:
            while not self._stop.is_set():
                asked = False
                delay = due - time.monotonic()
                if delay > 0 and self._wake.wait(delay):
                    self._wake.clear()
                    asked = True
                now = time.monotonic()
                if now >= due:
                    # Behind (a long GIL wait): the next tick is one period from now,
                    # never a burst of late ones.
                    due = max(due + self.period, now)
                    if self.capturing:
                        self.tick(me)
                if asked or now >= flush_due or len(self.buffer) >= self.buffer.limit // 2:
                    self._flush()
                    flush_due = now + FLUSH_S
                    self._threads.refresh()
                if now - wall0 >= GOVERN_S:
                    cpu = time.thread_time()
                    self._govern((cpu - cpu0) / (now - wall0))
                    cpu0, wall0 = cpu, now
        except Exception as exc:  # a bug of ours: say it once, the job goes on
            self._on_error(exc)

    def _govern(self, share: float) -> None:
        slowest = 1.0 / MIN_HZ
        if share > CPU_BUDGET and self.period < slowest:
            self.period = min(self.period * 2, slowest)
            self.slowed += 1
        elif share < CPU_BUDGET / 4 and self.period > 1.0 / self.hz:
            self.period = max(self.period / 2, 1.0 / self.hz)
