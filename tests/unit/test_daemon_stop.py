"""A node daemon's stop (SIGTERM), from both ends. The daemon: what the hooks wrote into
their connections is read, delivered and finished with a goodbye before it exits —
nothing a hook counted as handed over dies with it uncounted (a real collector on
127.0.0.1, a real daemon in this process, hooks speaking the frame protocol over real
sockets). The hook (agent/inprocess/process_hook.py): the frame whose send the stop broke
off goes again, whole, on the next connection — records and goodbye alike (a real Hook
against a Unix socket this test serves)."""

from __future__ import annotations

import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tfprof.agent.inprocess import config, frames
from tfprof.agent.inprocess.frames import FrameType
from tfprof.agent.inprocess.process_hook import Hook
from tfprof.agent.launch.daemon import NodeDaemon
from tfprof.agent.relay.socket_server import RelayServer
from tfprof.collector.jobdata import StreamData
from tfprof.collector.service.server import CollectorServer
from tfprof.collector.store import Store
from tfprof.core.records import COLUMNS, RecordTable

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


def stop_while_connected(
    collector: CollectorServer, socket_path: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """A process connects and writes its frames, the daemon stops while it is still
    connected: the daemon delivers every record once and ends the stream."""
    thread, stop, status = daemon_thread(collector, socket_path, tmp_path / "spool")
    hook = connect(socket_path)
    try:
        hook.sendall(hook_frames("svc"))
        _check_stop(tmp_path / "data", hook, thread, stop, status, capsys)
    finally:
        stop.set()
        hook.close()


def _check_stop(
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
    stop_while_connected(collector, socket_path, tmp_path, capsys)


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
    stop_while_connected(collector, socket_path, tmp_path, capsys)


# -- the hook's side -------------------------------------------------------------------

BIG_FRAME_RECORDS = 40_000  # a frame of several MB: far more than a socket buffers


def read_to_end(conn: socket.socket) -> bytes:
    chunks = []
    while chunk := conn.recv(1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def read_exactly(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise EOFError(f"the connection ended after {len(data)} of {size} bytes")
        data += chunk
    return data


def read_frame(conn: socket.socket) -> bytes:
    """Exactly one frame's bytes."""
    header = read_exactly(conn, frames.HEADER.size)
    return header + read_exactly(conn, frames.HEADER.unpack(header)[1])


def whole_frames(data: bytes) -> list[tuple[FrameType, memoryview]]:
    """The frames a relay would act on: a frame cut short at the end is left out, as the
    relay's reader leaves it out."""
    return list(frames.iter_frames([data]))


def records_in(received: list[tuple[FrameType, memoryview]]) -> list[int]:
    """Correlation ids of every record in ``received``'s records frames."""
    at = COLUMNS.index("correlation")
    ids: list[int] = []
    for kind, payload in received:
        if kind == FrameType.RECORDS:
            decoded = frames.decode_records(payload)
            width = 8 * decoded.count
            ids += frames.int64_values(decoded.column_data[at * width : (at + 1) * width])
    return ids


def big_table() -> RecordTable:
    table = RecordTable()
    for i in range(BIG_FRAME_RECORDS):
        table.add_kernel(start_ns=i, end_ns=i + 1, device=0, stream=7, name=0, correlation=i)
    return table


def daemon_socket(path: str) -> socket.socket:
    """A daemon's listening socket that this test plays the daemon on, by hand."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(4)
    server.settimeout(30)
    return server


def daemon_hook(path: str) -> Hook:
    cfg = config.load({"TFPROF_SOCKET": path, "TFPROF_RELAY": "daemon",
                       "TFPROF_EXIT_TIMEOUT": "30", "TFPROF_JOB": "svc"})  # fmt: skip
    hook = Hook(cfg, None, ("svc", "r1"))
    hook.start()
    return hook


def test_a_frame_cut_short_by_the_stop_goes_again_whole_on_the_next_connection(
    socket_path: str,
) -> None:
    server = daemon_socket(socket_path)
    hook = daemon_hook(socket_path)
    try:
        first, _ = server.accept()
        assert hook.submit(big_table())
        # Once the big frame's first bytes are here, the hook is inside its send,
        # blocked on the full socket with most of the frame still to write.
        hello = read_frame(first)
        assert first.recv(frames.HEADER.size, socket.MSG_PEEK | socket.MSG_WAITALL)
        # The daemon stops: it takes no more frames, and reads what was written.
        first.shutdown(socket.SHUT_RD)
        cut = whole_frames(hello + read_to_end(first))
        first.close()
        second, _ = server.accept()  # the hook reconnects (to the next daemon)
        exited = threading.Thread(target=hook.shutdown)  # the process exits
        exited.start()
        resent = whole_frames(read_to_end(second))
        second.close()
        exited.join(30)
    finally:
        server.close()
    assert [kind for kind, _ in cut] == [FrameType.HELLO], "the big frame was cut short"
    kinds = [kind for kind, _ in resent]
    assert kinds[0] == FrameType.HELLO and kinds[-1] == FrameType.GOODBYE, kinds
    # Every record once, none counted as dropped: the frame was sent again, whole.
    assert sorted(records_in(resent)) == list(range(BIG_FRAME_RECORDS))
    assert hook.dropped_queue == 0 and hook.undelivered == 0


def test_a_goodbye_whose_send_the_stop_broke_goes_on_the_next_connection(
    socket_path: str,
) -> None:
    # The process is idle when the daemon stops and learns of it only at exit, when
    # its goodbye cannot go: the goodbye (and the counts it carries) used to be lost,
    # leaving the process's last stream without an end.
    server = daemon_socket(socket_path)
    hook = daemon_hook(socket_path)
    try:
        first, _ = server.accept()
        hello = read_frame(first)
        first.shutdown(socket.SHUT_RD)  # the daemon stops while the process is idle
        exited = threading.Thread(target=hook.shutdown)  # then the process exits
        exited.start()
        assert whole_frames(hello + read_to_end(first))[0][0] == FrameType.HELLO
        first.close()
        second, _ = server.accept()
        received = whole_frames(read_to_end(second))
        second.close()
        exited.join(30)
    finally:
        server.close()
    assert [kind for kind, _ in received] == [FrameType.HELLO, FrameType.GOODBYE]
