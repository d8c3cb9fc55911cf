"""The sampler thread: every period, the Python stack of every other thread of the process.

One daemon thread reads ``sys._current_frames()`` and walks each thread's frames afresh
(``CodeTable.stack_of``); it keeps no frame between ticks, and skips the agent's own
threads. A sample's time is taken once per tick on the host realtime clock, as host
samples are. The same thread runs the process's stack flushes (``flush``, every
``FLUSH_S`` or sooner when asked) and governs its own cost: over each ``GOVERN_S`` it
compares its thread CPU time with the whole process's and halves its rate (down to
``MIN_HZ``) while it takes over ``CPU_BUDGET`` (0.5 %) of the job's CPU, unless it costs less
than ``CORE_FLOOR`` of one core (a job waiting on its GPU uses little CPU, and samples
of where it waits are what is wanted); it goes back up towards the configured rate when
well under. What a tick costs, mostly waking a thread whose caches went cold:
bench/results/code-cost.txt (bench/code_cost.py).

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
# Of the process's CPU time: above it the rate halves. Half the 1 % goal: waking the
# sampler also costs the sampled thread a little (GIL hand-offs, colder caches; the paired
# slices of bench/code_cost.py measure it, bench/results/code-cost.txt).
CPU_BUDGET = 0.005
CORE_FLOOR = 0.0025  # of one core: below it the budget does not apply
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
        self.capturing = False  # switched by capture windows (set_capturing)
        self.ticks = 0
        self.slowed = 0  # how often the budget halved the rate
        self.cpu_s = 0.0  # the thread's CPU time, as of its last look (and its end)
        self._flush = flush
        self._on_error = on_error
        self._threads = ThreadIds()
        # While capturing, the thread sleeps with time.sleep, one C call (an Event's timed
        # wait costs Python-level locking on every tick), and sees these flags at the next
        # tick. Between windows it waits on _idle, woken by a window opening or by stop.
        self._stopping = False
        self._flush_asked = False
        self._idle = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        thread = threading.Thread(target=self._run, name="tfprof-stacks", daemon=True)
        thread.start()
        self._thread = thread

    def request_flush(self) -> None:
        self._flush_asked = True

    def set_capturing(self, on: bool) -> None:
        """Tick (``on``) or wait idle, waking once a flush period, until a window opens."""
        self.capturing = on
        if on:
            self._idle.set()

    def stop(self, timeout: float) -> None:
        """End the thread (its last flush is the caller's to make)."""
        self._stopping = True
        self._idle.set()
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
        cpu0, wall0, job0 = time.thread_time(), time.monotonic(), time.process_time()
        due = wall0 + self.period
        flush_due = wall0 + FLUSH_S
        try:
            while not self._stopping:
                if not self.capturing:  # between windows: no tick, a flush a second
                    self._idle.wait(FLUSH_S)
                    self._idle.clear()
                    due = time.monotonic()
                delay = due - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                if self._stopping:
                    break
                now = time.monotonic()
                # Behind (a long GIL wait): the next tick is one period from now, never a
                # burst of late ones.
                due = max(due + self.period, now)
                if self.capturing:
                    self.tick(me)
                if (
                    self._flush_asked
                    or now >= flush_due
                    or len(self.buffer) >= self.buffer.limit // 2
                ):
                    self._flush_asked = False
                    self._flush()
                    flush_due = now + FLUSH_S
                    self._threads.refresh()
                if now - wall0 >= GOVERN_S:
                    cpu, job = time.thread_time(), time.process_time()
                    self.cpu_s = cpu
                    self._govern(cpu - cpu0, job - job0, now - wall0)
                    cpu0, wall0, job0 = cpu, now, job
        except Exception as exc:  # a bug of ours: say it once, the job goes on
            self._on_error(exc)
        finally:
            self.cpu_s = time.thread_time()

    def _govern(self, cpu: float, job: float, wall: float) -> None:
        """Halve or double the rate by this window's cost: ``cpu`` of the sampler thread,
        ``job`` of the whole process (the sampler's included), over ``wall`` seconds."""
        share, core = cpu / max(job, 1e-9), cpu / wall
        slowest = 1.0 / MIN_HZ
        if share > CPU_BUDGET and core > CORE_FLOOR and self.period < slowest:
            self.period = min(self.period * 2, slowest)
            self.slowed += 1
        elif (share < CPU_BUDGET / 3 or core < CORE_FLOOR / 3) and self.period > 1.0 / self.hz:
            self.period = max(self.period / 2, 1.0 / self.hz)  # doubled cost stays under
