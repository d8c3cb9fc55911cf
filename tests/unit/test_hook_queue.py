"""The hook (agent/inprocess/process_hook.py and its parts) without a launcher: the bounded
frame queue, drop accounting, and the sender talking to a real Unix socket server made by
the test."""

from __future__ import annotations

import json
import os
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tfprof.agent.inprocess import config, frames, launcher_link, notices
from tfprof.agent.inprocess.frame_queue import FrameQueue
from tfprof.agent.inprocess.frames import FrameType, decode_records, iter_frames
from tfprof.agent.inprocess.process_hook import Hook
from tfprof.agent.inprocess.sources.base import Sink, SourceUnavailable
from tfprof.core import records
from tfprof.core.records import RecordTable
from tfprof.core.version import __version__

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    """``notices.warn`` prints each message once per process; give every test a clean slate."""
    monkeypatch.setattr(notices, "_warned", set())


@pytest.fixture
def short_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory whose socket paths fit AF_UNIX's ~107-byte limit."""
    if len(str(tmp_path)) < 80:
        yield tmp_path
        return
    with tempfile.TemporaryDirectory(prefix="tfp", dir="/tmp") as d:
        yield Path(d)


def make_cfg(socket_path: str = "", queue_bytes: int = 1 << 20) -> config.AgentConfig:
    return config.load({})._replace(
        socket=socket_path, queue_bytes=queue_bytes, exit_timeout_s=10.0
    )


def kernels(hk: Hook, name: str, n: int = 1, start: int = 1_000) -> RecordTable:
    t = RecordTable()
    idx = hk.intern(name)
    for i in range(n):
        t.add_kernel(start_ns=start + i * 10, end_ns=start + i * 10 + 5, device=0, stream=7,
                     name=idx)  # fmt: skip
    return t


def records_of(frame: bytes) -> frames.DecodedRecords:
    ((kind, payload),) = list(iter_frames([frame]))
    assert kind is FrameType.RECORDS
    return decode_records(payload)


# -- FrameQueue ---------------------------------------------------------------------------


def test_queue_is_bounded_by_bytes_and_fifo() -> None:
    q = FrameQueue(max_bytes=100)
    assert q.put(b"a" * 40)
    assert q.put(b"b" * 40)
    assert not q.put(b"c" * 40)  # 120 > 100
    assert q.put(b"d" * 20)  # exactly 100 fits
    assert len(q) == 3
    assert q.get(timeout=1) == b"a" * 40
    assert q.put(b"e" * 40)
    assert [q.get(timeout=1) for _ in range(3)] == [b"b" * 40, b"d" * 20, b"e" * 40]
    assert q.get(timeout=0) is None


def test_a_frame_larger_than_the_bound_still_goes_into_an_empty_queue() -> None:
    q = FrameQueue(max_bytes=10)
    assert q.put(b"x" * 50)
    assert not q.put(b"y")
    assert q.get(timeout=1) == b"x" * 50


def test_put_with_wait_blocks_until_a_get_frees_room() -> None:
    q = FrameQueue(max_bytes=100)
    assert q.put(b"a" * 80)
    started, done = threading.Event(), threading.Event()
    result: list[bool] = []

    def producer() -> None:
        started.set()
        result.append(q.put(b"b" * 80, wait=True))
        done.set()

    t = threading.Thread(target=producer, daemon=True)
    t.start()
    assert started.wait(5)
    assert not done.wait(0.3), "put(wait=True) returned while the queue was full"
    assert q.get(timeout=1) == b"a" * 80
    assert done.wait(5)
    assert result == [True]
    assert q.get(timeout=1) == b"b" * 80


def test_close_releases_a_blocked_put_with_false() -> None:
    q = FrameQueue(max_bytes=10)
    assert q.put(b"x" * 10)
    done = threading.Event()
    result: list[bool] = []

    def producer() -> None:
        result.append(q.put(b"y", wait=True))
        done.set()

    threading.Thread(target=producer, daemon=True).start()
    q.close()
    assert done.wait(5)
    assert result == [False]
    assert not q.put(b"z")  # a closed queue takes nothing unforced


def test_force_ignores_the_bound_and_closure() -> None:
    q = FrameQueue(max_bytes=10)
    assert q.put(b"x" * 10)
    assert q.put(b"goodbye" * 10, force=True)
    q.close()
    assert q.put(b"late", force=True)
    assert [q.get(timeout=1) for _ in range(3)] == [b"x" * 10, b"goodbye" * 10, b"late"]


def test_get_wakes_up_for_a_put_from_another_thread() -> None:
    q = FrameQueue(max_bytes=100)
    threading.Timer(0.05, q.put, args=(b"late",)).start()
    assert q.get(timeout=10) == b"late"


# -- Hook.submit without a sender ---------------------------------------------------------


def test_submit_counts_drops_and_resends_the_dropped_frames_names(
    capsys: pytest.CaptureFixture[str],
) -> None:
    probe = len(encode_size_probe())
    hk = Hook(make_cfg(queue_bytes=probe + probe // 2), source=None)  # room for one frame

    assert hk.submit(kernels(hk, "first"))
    assert not hk.submit(kernels(hk, "second", n=1))  # queue full: dropped
    assert not hk.submit(kernels(hk, "third", n=1))
    assert (hk.records_sent, hk.dropped_queue) == (1, 2)

    first = records_of(hk.queue.get(timeout=1) or b"")
    assert (first.string_base, first.strings, first.dropped) == (1, ["first"], 0)

    assert hk.submit(kernels(hk, "fourth"))
    fourth = records_of(hk.queue.get(timeout=1) or b"")
    # The names of the dropped frames travel with the next frame that got through.
    assert (fourth.string_base, fourth.strings) == (2, ["second", "third", "fourth"])
    assert fourth.dropped == 2
    names = np.frombuffer(fourth.column_data, dtype="<i8").reshape(records.NUM_COLUMNS, -1)[
        records.COLUMN_INDEX["name"]
    ]
    assert names.tolist() == [4]
    assert (hk.records_sent, hk.dropped_queue) == (2, 2)

    err = capsys.readouterr().err.splitlines()
    assert err == [
        "tfprof: record queue full: dropping GPU records (counted in the trace metadata)"
    ]


def encode_size_probe() -> bytes:
    t = RecordTable()
    t.add_kernel(start_ns=0, end_ns=1, device=0, stream=0, name=1)
    return frames.encode_records_frame(t, 1, ["x" * 8], 0)


def test_an_empty_table_is_not_a_frame() -> None:
    hk = Hook(make_cfg(), source=None)
    assert hk.submit(RecordTable())
    assert len(hk.queue) == 0


# -- Hook against a real Unix socket ------------------------------------------------------


class FakeLauncher:
    """Accepts one connection and keeps every byte until the hook hangs up."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen(1)
        self.sock.settimeout(20)
        self.data = bytearray()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        conn.settimeout(20)
        with conn:
            while chunk := conn.recv(65536):
                self.data += chunk

    def frames(self, timeout: float = 20) -> list[tuple[FrameType, bytes]]:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the hook never closed its connection"
        return [(k, bytes(p)) for k, p in iter_frames([bytes(self.data)])]

    def close(self) -> None:
        self.sock.close()


class FakeSource:
    """A source that reports a device and a batch when it is stopped."""

    name = "fake"
    capture_lead_ns = 0

    def __init__(self) -> None:
        self.sink: Sink | None = None

    def start(self, sink: Sink, capturing: bool = True) -> None:
        self.sink = sink

    def set_capturing(self, on: bool, at_ns: int) -> None:
        pass

    def tracer_clock_ns(self) -> int | None:
        return 123_456

    def stop(self, deadline: float) -> None:
        assert self.sink is not None
        self.sink.add_devices([{"ordinal": 0, "uuid": "GPU-fake", "name": "Fake GPU"}])
        t = RecordTable()
        t.add_memcpy(start_ns=5, end_ns=9, device=0, stream=1, nbytes=4096, copy_kind=1,
                     name=self.sink.intern("copy"))  # fmt: skip
        self.sink.submit(t)
        self.sink.add_tracer_dropped(2)


def test_hook_sends_hello_records_and_goodbye(
    short_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    launcher = FakeLauncher(short_dir / "relay.sock")
    try:
        # The job's declared rank (config.load reads it; test_config covers that).
        hk = Hook(make_cfg(launcher.path)._replace(rank="3"), FakeSource())
        before = time.time_ns()
        hk.start()
        assert hk.submit(kernels(hk, "gemm", n=3))
        assert hk.submit(kernels(hk, "relu", n=2, start=9_000))
        hk.shutdown()
        hk.shutdown()  # idempotent
        got = launcher.frames()
    finally:
        launcher.close()

    kinds = [k for k, _ in got]
    assert kinds[0] is FrameType.HELLO
    assert kinds[-1] is FrameType.GOODBYE
    assert kinds.count(FrameType.HELLO) == 1
    assert kinds.count(FrameType.GOODBYE) == 1

    hello = json.loads(got[0][1])
    assert hello["pid"] == os.getpid()
    assert hello["ppid"] == os.getppid()
    assert hello["task"] == "3"
    assert hello["argv"] and isinstance(hello["argv"], list)
    assert hello["argv"] == launcher_link.process_argv()
    assert hello["source"] == "fake"
    assert hello["agent_version"] == __version__
    assert before <= hello["clock"]["realtime_ns"] <= time.time_ns()
    assert hello["clock"]["monotonic_ns"] > 0
    assert hello["clock"]["tracer_ns"] == 123_456

    devices = [json.loads(p) for k, p in got if k is FrameType.DEVICES]
    assert devices == [[{"ordinal": 0, "uuid": "GPU-fake", "name": "Fake GPU"}]]

    batches = [decode_records(p) for k, p in got if k is FrameType.RECORDS]
    assert [b.count for b in batches] == [3, 2, 1]
    strings = [""] + [s for b in batches for s in b.strings]
    assert strings == ["", "gemm", "relu", "copy"]
    assert [b.string_base for b in batches] == [1, 2, 3]

    goodbye = json.loads(got[-1][1])
    assert goodbye == {
        "records_sent": 6,
        "dropped_queue": 0,
        "dropped_tracer": 2,
        "dropped_stack_samples": 0,
    }
    assert capsys.readouterr().err == ""


def test_source_unavailable_is_one_line_and_the_process_still_says_hello(
    short_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    class Unavailable(FakeSource):
        def start(self, sink: Sink, capturing: bool = True) -> None:
            raise SourceUnavailable("no CUDA driver")

    launcher = FakeLauncher(short_dir / "relay.sock")
    try:
        hk = Hook(make_cfg(launcher.path), Unavailable())
        hk.start()
        hk.shutdown()
        got = launcher.frames()
    finally:
        launcher.close()
    assert [k for k, _ in got] == [FrameType.HELLO, FrameType.GOODBYE]
    assert json.loads(got[0][1])["source"] == "none"
    assert capsys.readouterr().err.splitlines() == [
        "tfprof: no CUDA driver - GPU activity of this process is not traced"
    ]


def test_unreachable_launcher_warns_once_and_never_blocks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hk = Hook(make_cfg(str(tmp_path / "nobody-listens.sock")), FakeSource())
    hk.start()
    hk.submit(kernels(hk, "before-failure"))
    assert hk._delivered.wait(10), "the sender never gave up on the missing socket"
    assert not hk.submit(kernels(hk, "after-failure"))
    assert not hk.submit(kernels(hk, "after-failure-wait"), wait=True)  # must not block
    hk.shutdown()
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("tfprof: cannot reach the tfprof launcher at ")
    assert "nobody-listens.sock" in err[0]
    assert err[0].endswith("; not traced")


def test_launcher_hanging_up_early_does_not_raise(
    short_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(short_dir / "rude.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    server.settimeout(20)
    try:
        hk = Hook(make_cfg(path), source=None)
        hk.start()
        conn, _ = server.accept()
        conn.close()  # the launcher goes away
        for i in range(50):  # keep sending until the sender notices
            hk.submit(kernels(hk, f"k{i}", n=100))
        hk.shutdown()
    finally:
        server.close()
    err = capsys.readouterr().err.splitlines()
    assert err, "losing the launcher must be said"
    assert all(line.startswith("tfprof: ") for line in err)
