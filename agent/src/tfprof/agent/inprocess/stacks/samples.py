"""Stack samples waiting for the next stacks frame, and the OS ids of Python threads.

``SampleBuffer`` is bounded: when the stacks frames cannot leave as fast as samples come
(a full hook queue), samples beyond ``limit`` are dropped and counted, never the job's
memory. ``ThreadIds`` maps ``threading.get_ident()`` values (the keys of
``sys._current_frames()``) to OS thread ids, which CUPTI's API records and host metrics
carry, and says which threads are the agent's own (named ``tfprof-...``).
"""

from __future__ import annotations

import array
import collections
import threading

from tfprof.core.code_stacks import SAMPLE_COLUMNS

# Samples held at most between two stacks frames (a small tuple each).
MAX_PENDING_SAMPLES = 1 << 16
OWN_THREAD_PREFIX = "tfprof-"


class SampleBuffer:
    """Samples as tuples in a deque: ``add`` is one append, safe from any thread without a
    lock (launch captures add from the launching threads), ``take`` pops what is there."""

    def __init__(self, limit: int = MAX_PENDING_SAMPLES) -> None:
        self.limit = limit
        self.dropped = 0  # samples lost in this process so far (cumulative)
        self.queue: collections.deque[tuple[int, int, int, int, int]] = collections.deque()
        self._count_lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.queue)

    def add(self, time_ns: int, thread: int, stack: int, correlation: int, kind: int) -> bool:
        """Keep one sample; False (counted) when the buffer is full or there is no stack."""
        if stack and len(self.queue) < self.limit:
            self.queue.append((time_ns, thread, stack, correlation, kind))
            return True
        self.count_dropped(1)
        return False

    def extend(self, columns: list[array.array[int]]) -> int:
        """Keep whole columns of samples (``SAMPLE_COLUMNS`` order) as far as they fit;
        the number kept (the caller keeps the rest: nothing is counted as dropped)."""
        keep = min(len(columns[0]), max(0, self.limit - len(self.queue)))
        self.queue.extend(zip(*(column[:keep] for column in columns)))
        return keep

    def take(self) -> list[array.array[int]]:
        """The samples held (those added meanwhile stay for the next take), as columns."""
        queue = self.queue
        rows = [queue.popleft() for _ in range(len(queue))]
        columns = [array.array("q") for _ in SAMPLE_COLUMNS]
        if rows:
            for column, values in zip(columns, zip(*rows)):
                column.extend(values)
        return columns

    def count_dropped(self, n: int) -> None:
        with self._count_lock:
            self.dropped += n


class ThreadIds:
    def __init__(self) -> None:
        self._native: dict[int, int] = {}
        self._unknown: set[int] = set()  # idents threading did not know at the last look
        self.own: frozenset[int] = frozenset()

    def native(self, ident: int) -> int:
        """The OS thread id of a Python thread ident; 0 when threading does not know it
        (a thread started outside ``threading`` that never asked for its Thread)."""
        found = self._native.get(ident)
        if found is None:
            if ident in self._unknown:
                return 0
            self.refresh()  # a thread started since the last look
            found = self._native.get(ident)
            if found is None:
                self._unknown.add(ident)
                return 0
        return found

    def refresh(self) -> None:
        """Look at threading's list again (idents of ended threads are reused)."""
        native: dict[int, int] = {}
        own = set()
        for thread in threading.enumerate():
            if thread.ident is None:
                continue
            native[thread.ident] = getattr(thread, "native_id", None) or 0
            if thread.name.startswith(OWN_THREAD_PREFIX):
                own.add(thread.ident)
        self._native, self.own = native, frozenset(own)
        self._unknown = set()
