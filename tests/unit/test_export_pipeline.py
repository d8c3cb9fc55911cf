"""BlockPipeline (export/output.py): blocks finished and written on two threads, in order."""

from __future__ import annotations

import functools
import io
import threading

import pytest

from tfprof.collector.export.output import BlockPipeline


def test_blocks_are_written_in_the_order_they_were_put() -> None:
    out = io.BytesIO()
    with BlockPipeline(out, depth=2) as pipeline:
        for i in range(200):
            pipeline.put(functools.partial(str.encode, f",{i}"), skip=int(i == 0))
    assert out.getvalue().decode() == ",".join(str(i) for i in range(200))


def test_finishing_and_writing_run_on_their_own_threads() -> None:
    main = threading.get_ident()
    seen: dict[str, int] = {}

    class Out:
        def write(self, data: bytes | memoryview) -> int:
            seen["write"] = threading.get_ident()
            return len(data)

    def finish() -> bytes:
        seen["finish"] = threading.get_ident()
        return b"x"

    with BlockPipeline(Out()) as pipeline:
        pipeline.put(finish)
    assert len({main, seen["finish"], seen["write"]}) == 3


class Full:
    """A file whose disk fills after ``room`` writes."""

    def __init__(self, room: int) -> None:
        self.room = room
        self.blocks: list[bytes] = []

    def write(self, data: bytes | memoryview) -> int:
        if len(self.blocks) >= self.room:
            raise OSError(28, "No space left on device")
        self.blocks.append(bytes(data))
        return len(data)


def test_a_write_error_reaches_the_caller_and_stops_the_blocks() -> None:
    out = Full(room=3)
    made: list[int] = []

    def block(i: int) -> bytes:
        made.append(i)
        return b"%d" % i

    with pytest.raises(OSError, match="No space"), BlockPipeline(out, depth=2) as pipeline:
        for i in range(1000):
            pipeline.put(functools.partial(block, i))
    assert out.blocks == [b"0", b"1", b"2"]
    assert len(made) < 1000  # the caller stopped putting blocks soon after


def test_a_finish_error_reaches_the_caller_and_nothing_after_it_is_written() -> None:
    out = io.BytesIO()

    def broken() -> bytes:
        raise ValueError("bad block")

    with pytest.raises(ValueError, match="bad block"), BlockPipeline(out) as pipeline:
        pipeline.put(lambda: b"a")
        pipeline.put(broken)
        pipeline.put(lambda: b"c")
    assert out.getvalue() == b"a"


def test_an_error_in_the_caller_drops_the_waiting_blocks() -> None:
    out = io.BytesIO()
    release = threading.Event()

    def slow() -> bytes:
        release.wait(10)
        return b"slow"

    with pytest.raises(KeyboardInterrupt), BlockPipeline(out, depth=8) as pipeline:
        pipeline.put(slow)
        for _ in range(5):
            pipeline.put(lambda: b"later")
        release.set()
        raise KeyboardInterrupt
    assert b"later" not in out.getvalue()


def test_then_runs_on_the_writing_thread_after_the_skip() -> None:
    out = io.BytesIO()
    threads: set[int] = set()

    def upper(data: bytes | memoryview) -> bytes:
        threads.add(threading.get_ident())
        return bytes(data).upper()

    with BlockPipeline(out) as pipeline:
        pipeline.put(functools.partial(bytes, b",abc"), skip=1, then=upper)
        pipeline.put(functools.partial(bytes, b",de"), then=upper)
    assert out.getvalue() == b"ABC,DE"
    assert threading.get_ident() not in threads and len(threads) == 1
