"""agent/daemon.py's stop (SIGTERM): what the hooks wrote into their connections is
read, delivered and finished with a goodbye before the daemon exits — nothing a hook
counted as handed over dies with the daemon uncounted. A real collector on 127.0.0.1,
a real daemon in this process, hooks speaking the frame protocol over real sockets."""

from __future__ import annotations

import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tfprof.agent import config, frames
from tfprof.agent.daemon import NodeDaemon
from tfprof.agent.frames import FrameType
from tfprof.agent.relay import RelayServer
from tfprof.collector.model import StreamData
from tfprof.collector.server import CollectorServer
from tfprof.collector.store import Store
from tfprof.core.records import RecordTable

FRAME_RECORDS = 200
FRAMES = 3


@pytest.fixture
def socket_path() -> Iterator[str]:
    with tempfile.TemporaryDirectory(dir="/tmp") as short:  # Unix socket paths are short
        yield str(Path(short) / "agent.sock")


def kernels(first: int) -> RecordTable:
    table = RecordTable()
    for i in range(first, first + FRAME_RECORDS):
        table.add_kernel(start_ns=1_000 * i, end_ns=1_000 * i + 500, device=0, stream=7,
                         name=1, correlation=i)  # fmt: skip
    return table


def hook_frames(job: str) -> bytes:
    """What a traced process writes: hello, then FRAMES records frames (no goodbye: it
    lives on)."""
    hello = {"pid": 4242, "ppid": 1, "argv": ["train.py"], "task": "0", "source": "replay",
             "job": job, "run_id": "r1", "clock": {"realtime_ns": time.time_ns(),
             "monotonic_ns": time.monotonic_ns(), "tracer_ns": 0}}  # fmt: skip
    out = frames.encode_json_frame(FrameType.HELLO, hello)
    for k in range(FRAMES):
        base, strings = (1, ["kernel"]) if k == 0 else (2, [])  # the name travels once
        out += frames.encode_records_frame(kernels(k * FRAME_RECORDS), base, strings, 0)
    return out


def connect(path: str) -> socket.socket:
    """A hook's connection, once the daemon's socket listens."""
    deadline = time.monotonic() + 30
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
            return sock
        except OSError:
            sock.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def daemon_thread(
    collector: CollectorServer, path: str, spool: Path
) -> tuple[threading.Thread, threading.Event, list[int]]:
    env = {"TFPROF_COLLECTOR": collector.address, "TFPROF_SPOOL_DIR": str(spool),
           "TFPROF_HOST_METRICS_INTERVAL": "0", "TFPROF_CLOCK_INTERVAL": "0"}  # fmt: skip
    cfg = config.load(env)
    daemon = NodeDaemon(cfg, path, "", [])
    stop = threading.Event()
    status: list[int] = []
    thread = threading.Thread(target=lambda: status.append(daemon.run(stop)))
    thread.start()
    return thread, stop, status


def stored_stream(data: Path, job: str) -> StreamData:
    """The job's one stream as the collector stored it (the fixture's data folder)."""
    (run,) = Store(data).load_jobs([job])
    (stream,) = run.streams
    return stream


def stop_and_check(
    data: Path,
    hook: socket.socket,
    thread: threading.Thread,
    stop: threading.Event,
    status: list[int],
    capsys: pytest.CaptureFixture[str],
) -> None:
    stop.set()
    thread.join(60)
    assert status == [0]
    # The daemon counted the stream it ended and what it delivered on it...
    expected = FRAMES * FRAME_RECORDS
    err = capsys.readouterr().err
    assert f"daemon stopped: 1 stream(s), {expected:,} records delivered, 0 dropped" in err, err
    # ... and the collector has every record once, and the goodbye: the run is whole.
    stream = stored_stream(data, "svc")
    assert stream.num_records == expected
    assert sorted(stream.records["correlation"].tolist()) == list(range(expected))
    assert stream.finished
    # The hook learns of the stop at its next send, and reconnects (not here).
    with pytest.raises(OSError):
        for _ in range(100):
            hook.sendall(b"\0" * 65536, getattr(socket, "MSG_NOSIGNAL", 0))
    hook.close()


def test_a_stopped_daemon_delivers_what_it_read_and_ends_the_stream(
    collector: CollectorServer, socket_path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The process is still connected when the daemon stops: its stream used to be left
    # unfinished, what the daemon held for the collector lost with it.
    thread, stop, status = daemon_thread(collector, socket_path, tmp_path / "spool")
    hook = connect(socket_path)
    try:
        hook.sendall(hook_frames("svc"))
        stop_and_check(tmp_path / "data", hook, thread, stop, status, capsys)
    finally:
        stop.set()
        hook.close()


def test_a_connection_not_accepted_yet_when_the_daemon_stops_is_read(
    collector: CollectorServer,
    socket_path: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The process connected and wrote its frames, but the daemon had not accepted the
    # connection when it stopped (here its acceptor never runs): closing the socket
    # dropped the backlog, and the frames the process had handed over with it.
    monkeypatch.setattr(RelayServer, "start", lambda self: None)
    thread, stop, status = daemon_thread(collector, socket_path, tmp_path / "spool")
    hook = connect(socket_path)
    try:
        hook.sendall(hook_frames("svc"))
        stop_and_check(tmp_path / "data", hook, thread, stop, status, capsys)
    finally:
        stop.set()
        hook.close()
