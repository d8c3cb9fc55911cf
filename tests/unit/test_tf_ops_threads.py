"""TensorFlow's thread ids back to OS thread ids (tfprof.agent.inprocess.tf_ops_threads)."""

from __future__ import annotations

import random
import threading

from tfprof.agent.inprocess.tf_ops_threads import (
    ThreadResolver,
    pthread_of,
    thread_hash,
    threads_by_stack,
)

# A pair read from TensorFlow 2.21's own XSpace: the main thread's pthread_t and the id
# of the line TF's host tracer gave that thread.
TF_PTHREAD, TF_LINE_ID = 139889911753600, 8739047528787779511


def test_hash_matches_tensorflow_and_inverts() -> None:
    assert thread_hash(TF_PTHREAD) == TF_LINE_ID
    assert pthread_of(TF_LINE_ID) == TF_PTHREAD
    rng = random.Random(7)
    for _ in range(1000):
        pthread = rng.getrandbits(64)
        line_id = thread_hash(pthread)
        signed = line_id - (1 << 64) if line_id >= 1 << 63 else line_id  # XLine.id is int64
        assert pthread_of(line_id) == pthread_of(signed) == pthread


def _parked_thread() -> tuple[threading.Thread, threading.Event]:
    release, parked = threading.Event(), threading.Event()

    def park() -> None:
        parked.set()
        release.wait(30)  # blocked in a futex: its stack pointer is readable

    thread = threading.Thread(target=park, daemon=True)
    thread.start()
    parked.wait(10)
    return thread, release


def test_a_blocked_thread_is_found_through_its_stack() -> None:
    thread, release = _parked_thread()
    try:
        assert thread.ident is not None
        found = {}
        for _ in range(50):  # it may still be on its way into the wait
            found = threads_by_stack({thread.ident})
            if found:
                break
            threading.Event().wait(0.01)
        assert found == {thread.ident: thread.native_id}
    finally:
        release.set()
        thread.join()


def test_resolver_maps_python_threads_and_keeps_ended_ones() -> None:
    thread, release = _parked_thread()
    assert thread.ident is not None and thread.native_id is not None
    main_line = thread_hash(threading.get_ident())
    worker_line = thread_hash(thread.ident)
    resolver = ThreadResolver(attempts=2, pause_s=0.001)
    first = resolver.resolve([main_line, worker_line, main_line])
    assert first == {main_line: threading.get_native_id(), worker_line: thread.native_id}
    release.set()
    thread.join()
    # Gone by the next drain, its events are still on its OS thread id.
    assert resolver.resolve([worker_line]) == {worker_line: thread.native_id}


def test_unknown_thread_keeps_tensorflows_id() -> None:
    line_id = thread_hash(0x10)  # no thread's descriptor lives at address 0x10
    assert ThreadResolver(attempts=2, pause_s=0.001).resolve([line_id]) == {line_id: line_id}
