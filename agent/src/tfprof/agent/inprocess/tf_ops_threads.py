"""TensorFlow's thread ids, turned back into OS thread ids.

TensorFlow's Linux wheels name a host thread in its profiler output (an XLine id) by
``std::hash<std::thread::id>`` of the thread, which libstdc++ computes as its 64-bit
``_Hash_bytes`` (a MurmurHash2 variant) of the ``pthread_t``. Every step of that hash is
invertible (odd multipliers modulo 2**64, ``x ^ x >> 47``), so ``pthread_of`` gives the
``pthread_t`` back. From there to the OS thread id (what CUPTI, NVTX and tracks use):

- Python threads (the main thread, where eager ops run) are known by both ids through
  ``threading.enumerate()``;
- any other thread (TensorFlow's ``tf_Compute`` pool, which runs graph ops) keeps its
  ``pthread_t`` — the address of glibc's thread descriptor — at the top of its own stack
  mapping. ``/proc/self/task/TID/syscall`` gives the stack pointer of each thread that is
  not on a CPU right now, ``/proc/self/maps`` the mapping that holds it: the thread whose
  stack mapping holds the ``pthread_t`` is the one. Only files are read, never memory.

A thread on a CPU at that moment is tried again a few times, then the id found at an
earlier drain is used; one never resolved (a thread that started and ended between two
drains) keeps TensorFlow's own id, a 64-bit number no OS thread id reaches. Standard
library only.
"""

from __future__ import annotations

import bisect
import os
import threading
import time
from collections.abc import Iterable

_MASK = (1 << 64) - 1
_MUL = (0xC6A4A793 << 32) + 0x5BD1E995  # libstdc++ _Hash_bytes, 64-bit size_t
_MUL_INVERSE = pow(_MUL, -1, 1 << 64)
_SEED = 0xC70F6907  # std::_Hash_impl's seed
_START = (_SEED ^ (8 * _MUL)) & _MASK  # the hash state before its one 8-byte block
_TASKS = "/proc/self/task"


def _shift_mix(value: int) -> int:
    return value ^ (value >> 47)  # its own inverse: 2 * 47 >= 64


def thread_hash(pthread: int) -> int:
    """``std::hash<std::thread::id>`` of a thread, as libstdc++ computes it (unsigned)."""
    data = (_shift_mix((pthread * _MUL) & _MASK) * _MUL) & _MASK
    state = ((_START ^ data) * _MUL) & _MASK
    return _shift_mix((_shift_mix(state) * _MUL) & _MASK)


def pthread_of(line_id: int) -> int:
    """The ``pthread_t`` whose ``thread_hash`` is ``line_id`` (signed or not)."""
    state = (_shift_mix(line_id & _MASK) * _MUL_INVERSE) & _MASK
    data = ((_shift_mix(state) * _MUL_INVERSE) & _MASK) ^ _START
    return (_shift_mix((data * _MUL_INVERSE) & _MASK) * _MUL_INVERSE) & _MASK


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read()
    except OSError:
        return None


class _Mappings:
    """The process's memory mappings, searchable by address."""

    def __init__(self, text: str) -> None:
        spans: list[tuple[int, int]] = []
        for line in text.splitlines():
            low, _, high = line.partition(" ")[0].partition("-")
            try:
                spans.append((int(low, 16), int(high, 16)))
            except ValueError:
                continue
        spans.sort()
        self._starts = [low for low, _ in spans]
        self._spans = spans

    def find(self, address: int) -> tuple[int, int] | None:
        i = bisect.bisect_right(self._starts, address) - 1
        if i >= 0 and self._spans[i][0] <= address < self._spans[i][1]:
            return self._spans[i]
        return None


def _stack_pointers() -> dict[int, int]:
    """The stack pointer of each thread of this process that is off-CPU now."""
    pointers: dict[int, int] = {}
    try:
        tids = [int(name) for name in os.listdir(_TASKS) if name.isdigit()]
    except OSError:
        return pointers
    for tid in tids:
        # "NR args... SP PC" in a system call, "-1 SP PC" when blocked outside one,
        # "running" on a CPU.
        fields = (_read(f"{_TASKS}/{tid}/syscall") or "").split()
        if len(fields) >= 3 and fields[0] != "running":
            try:
                pointers[tid] = int(fields[-2], 16)
            except ValueError:
                pass
    return pointers


def threads_by_stack(pthreads: set[int]) -> dict[int, int]:
    """OS thread id of each ``pthread_t`` whose thread is off-CPU now, by stack mapping."""
    mappings = _Mappings(_read("/proc/self/maps") or "")
    by_span: dict[tuple[int, int] | None, int] = {}
    shared = set()  # one mapping holding two stacks (no guard page): ambiguous
    for tid, sp in _stack_pointers().items():
        span = mappings.find(sp)
        if span in by_span:
            shared.add(span)
        by_span[span] = tid
    for span in shared | {None}:
        by_span.pop(span, None)
    found: dict[int, int] = {}
    for pthread in pthreads:
        owner = by_span.get(mappings.find(pthread))
        if owner is not None:
            found[pthread] = owner
    return found


class ThreadResolver:
    """Maps TensorFlow line ids to OS thread ids; ``resolve`` at each drain."""

    def __init__(self, attempts: int = 5, pause_s: float = 0.002) -> None:
        self._attempts = attempts
        self._pause_s = pause_s
        self._known: dict[int, int] = {}  # pthread_t -> OS tid, from earlier drains

    def resolve(self, line_ids: Iterable[int]) -> dict[int, int]:
        """OS thread id for each line id; TensorFlow's id where none is found."""
        wanted = {line_id: pthread_of(line_id) for line_id in set(line_ids)}
        found: dict[int, int] = {}
        python_threads = {t.ident: t.native_id for t in threading.enumerate()}
        # Kept: a Python thread that ends before the next drain is still known then.
        self._known.update((k, v) for k, v in python_threads.items() if k and v)
        for line_id, pthread in wanted.items():
            tid = python_threads.get(pthread)
            if tid is not None:
                found[line_id] = tid
        for attempt in range(self._attempts):
            left = {k: v for k, v in wanted.items() if k not in found}
            if not left:
                break
            if attempt:
                time.sleep(self._pause_s)
            by_pthread = threads_by_stack(set(left.values()))
            for line_id, pthread in left.items():
                tid = by_pthread.get(pthread)
                if tid is not None:
                    found[line_id] = tid
        for line_id, pthread in wanted.items():
            tid = found.get(line_id)
            if tid is not None:
                self._known[pthread] = tid
            else:
                # On a CPU at every look, or gone: the id an earlier drain found.
                found[line_id] = self._known.get(pthread, line_id)
        return found
