"""Capture windows end to end on the agent side: a collector (a minimal gRPC servicer
written here, answering Stream with acks that carry CaptureWindows) -> the launcher's
delivery reader -> the relay -> a CAPTURE frame down the Unix socket -> the hook in a
real process, replaying a real GPU trace at speed 1 with capture windows.

Record times are host realtime; a window's start is on the collector's clock, so the
records must fall inside [start - offset, start - offset + duration), with the offset the
stream's hello carries. Periodic mode needs no collector push at all.
"""

from __future__ import annotations

import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from tests.integration.conftest import agent_cmd, clean_env
from tests.integration.dense_replay import DENSE, widest_gap
from tfprof.agent.relay.collector_client import CollectorClient
from tfprof.agent.relay.process_link import ProcessLink
from tfprof.agent.relay.socket_server import RelayServer
from tfprof.proto import collector_pb2 as pb
from tfprof.proto import collector_pb2_grpc as pb_grpc

pytestmark = pytest.mark.timeout(120)

MS = 10**6
S = 10**9


class WindowCollector(pb_grpc.CollectorServicer):
    """Stores record start times, acks every batch, and pushes capture windows on
    demand down every live stream. Its clock runs ``skew_ns`` ahead of the host's."""

    def __init__(self, skew_ns: int = 0) -> None:
        self.skew_ns = skew_ns
        self.hellos: list[pb.Hello] = []
        self.starts: list[int] = []
        self.hello_seen = threading.Event()
        self._live: list[queue.Queue[pb.Ack | None]] = []
        self._lock = threading.Lock()

    def now_ns(self) -> int:
        return time.time_ns() + self.skew_ns

    def StartCapture(
        self, request: pb.CaptureRequest, context: grpc.ServicerContext
    ) -> pb.CaptureReply:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "this test pushes windows itself")

    def ListCaptures(
        self, request: pb.ListCapturesRequest, context: grpc.ServicerContext
    ) -> pb.ListCapturesReply:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "this test pushes windows itself")

    def LiveFigures(
        self, request: pb.LiveFiguresRequest, context: grpc.ServicerContext
    ) -> pb.LiveFiguresReply:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "this test pushes windows itself")

    def Export(
        self, request: pb.ExportRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.ExportChunk]:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "this test pushes windows itself")

    def Clock(self, request: pb.ClockRequest, context: grpc.ServicerContext) -> pb.ClockReply:
        t = self.now_ns()
        return pb.ClockReply(t1_ns=request.t1_ns, t2_ns=t, t3_ns=t)

    def Stream(
        self, request_iterator: Iterator[pb.AgentMessage], context: grpc.ServicerContext
    ) -> Iterator[pb.Ack]:
        out: queue.Queue[pb.Ack | None] = queue.Queue()

        def read() -> None:
            try:
                for message in request_iterator:
                    if message.HasField("hello"):
                        with self._lock:
                            self.hellos.append(message.hello)
                            self._live.append(out)
                        out.put(pb.Ack(seq=0))
                        self.hello_seen.set()
                    elif message.HasField("batch"):
                        with self._lock:
                            self.starts.extend(message.batch.records.start_ns)
                        out.put(pb.Ack(seq=message.batch.seq))
            finally:
                out.put(None)

        threading.Thread(target=read, daemon=True).start()
        while (ack := out.get()) is not None:
            yield ack
        with self._lock:
            if out in self._live:
                self._live.remove(out)

    def push(self, window: pb.CaptureWindow) -> int:
        """Send ``window`` on an ack with seq 0 (nothing new) down every live stream."""
        with self._lock:
            for out in self._live:
                out.put(pb.Ack(seq=0, captures=[window]))
            return len(self._live)

    def records(self) -> list[int]:
        with self._lock:
            return sorted(self.starts)


@pytest.fixture
def collector() -> Iterator[tuple[WindowCollector, str]]:
    servicer = WindowCollector(skew_ns=37 * S)  # a host 37 s behind the collector
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    pb_grpc.add_CollectorServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield servicer, f"127.0.0.1:{port}"
    finally:
        server.stop(grace=None)


def assert_inside(got: list[int], window: tuple[int, int], gap: int) -> None:
    assert got, "no record captured in the window"
    outside = [t for t in got if not window[0] <= t < window[1]]
    assert outside == [], f"{len(outside)} records outside the window"
    # A dense trace at speed 1: the first and last records are near the window's edges.
    assert got[0] - window[0] <= gap + 50 * MS and window[1] - got[-1] <= gap + 50 * MS


@pytest.fixture
def short_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="tfp", dir="/tmp") as d:
        yield Path(d)


def test_a_window_pushed_into_the_relay_reaches_the_hook_in_local_time(
    collector: tuple[WindowCollector, str], traces: Path, short_dir: Path
) -> None:
    servicer, address = collector
    offset = 5 * S  # this stream's clock offset: collector = local + offset
    client = CollectorClient(address)
    links: list[ProcessLink] = []

    def on_hello(info: dict[str, object]) -> ProcessLink:
        hello = pb.Hello(job="capture", pid=int(str(info["pid"])), clock_offset_ns=offset,
                         source=str(info["source"]), stream_id="s1")  # fmt: skip
        link = ProcessLink(client, hello, lambda why: None)
        links.append(link)
        return link

    relay = RelayServer(str(short_dir / "agent.sock"), on_hello)
    relay.start()
    replay = str(traces / DENSE)
    env = clean_env(
        TFPROF_SOCKET=relay.path,
        TFPROF_RUN_DIR=str(short_dir),
        TFPROF_SOURCE=f"replay:{replay}",
        TFPROF_REPLAY_REPEAT="25",  # ~3.5 s at speed 1
        TFPROF_CAPTURE="on-demand",
    )
    job = subprocess.Popen(
        [sys.executable, "-c", "from tfprof.agent.inprocess import hook; hook.start(); "
         "import time; time.sleep(4.0)"],
        env=env, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not links and time.monotonic() < deadline:
            time.sleep(0.05)
        assert links, "the hook never said hello"
        time.sleep(0.5)  # idle and armed: nothing may arrive
        start = time.time_ns() + 700 * MS  # local
        sent = links[0].on_captures(
            [pb.CaptureWindow(capture_id="c1", start_ns=start + offset, duration_ns=1 * S)]
        )
        assert sent == 1
        _, err = job.communicate(timeout=60)
        assert job.returncode == 0, err
        assert relay.wait_closed(10.0)
        assert links[0].finish(timeout=10.0)
    finally:
        job.kill()
        relay.close()
        client.close()
    assert "tfprof" not in err, err
    assert_inside(servicer.records(), (start, start + 1 * S), widest_gap(replay))


def run_job(address: str, replay: str, capture: str, seconds: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        agent_cmd("run", "--collector", address, "--capture", capture,
                  "--source", f"replay:{replay}", "--replay-repeat", "28", "--",
                  sys.executable, "-c", f"import time; time.sleep({seconds})"),
        env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_an_ack_carrying_a_window_opens_it_at_the_stream_offset(
    collector: tuple[WindowCollector, str], traces: Path
) -> None:
    servicer, address = collector
    replay = str(traces / DENSE)
    job = run_job(address, replay, "on-demand", 4.5)
    try:
        assert servicer.hello_seen.wait(30), "no stream reached the collector"
        time.sleep(0.5)
        start = servicer.now_ns() + 800 * MS  # on the collector's clock
        assert servicer.push(pb.CaptureWindow(capture_id="c2", start_ns=start,
                                              duration_ns=1 * S)) == 1  # fmt: skip
        _, err = job.communicate(timeout=60)
    finally:
        job.kill()
    assert job.returncode == 0, err
    (hello,) = servicer.hellos
    # The launcher measured the skew through Clock; the hook got the window in local time.
    assert abs(hello.clock_offset_ns - servicer.skew_ns) < 1 * S
    local = start - hello.clock_offset_ns
    assert_inside(servicer.records(), (local, local + 1 * S), widest_gap(replay))


def test_periodic_windows_have_the_configured_length_and_period(
    collector: tuple[WindowCollector, str], traces: Path
) -> None:
    servicer, address = collector
    replay = str(traces / DENSE)
    job = run_job(address, replay, "periodic:500ms/1s", 4.5)
    _, err = job.communicate(timeout=60)
    assert job.returncode == 0, err
    got = servicer.records()
    assert got, "no record captured"
    # Windows start at whole seconds of the host clock and last 500 ms.
    assert all(t % S < 500 * MS for t in got), "records outside the periodic windows"
    windows = {t // S: [u for u in got if u // S == t // S] for t in got}
    assert len(windows) >= 3
    gap = widest_gap(replay)
    for second, inside in windows.items():
        if second == min(windows) or second == max(windows):
            continue  # the replay may start or end inside these
        assert inside[0] - second * S <= gap + 50 * MS
        assert second * S + 500 * MS - inside[-1] <= gap + 50 * MS


def test_the_delivery_reader_forwards_windows_and_a_seq_0_ack_acknowledges_nothing(
    collector: tuple[WindowCollector, str],
) -> None:
    from tfprof.agent.relay.delivery import StreamDelivery

    servicer, address = collector
    client = CollectorClient(address)
    got: list[list[pb.CaptureWindow]] = []
    arrived = threading.Event()

    def on_captures(windows: list[pb.CaptureWindow]) -> None:
        got.append(windows)
        arrived.set()

    hello = pb.Hello(job="capture", pid=1, stream_id="s2")
    delivery = StreamDelivery(client, hello, on_captures=on_captures)
    try:
        for start in (10, 20):
            message = pb.AgentMessage()
            message.batch.records.start_ns.append(start)
            delivery.send(message, 1)
        deadline = time.monotonic() + 30
        while delivery.acked_seq < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        window = pb.CaptureWindow(capture_id="c3", start_ns=123, duration_ns=456)
        assert servicer.push(window) == 1
        assert arrived.wait(30)
        assert delivery.acked_seq == 2  # the seq-0 ack took nothing back
        assert delivery.finish(pb.Goodbye(records_sent=2), timeout=30)
    finally:
        client.close()
    assert got == [[window]]
    assert delivery.records_acked == 2 and servicer.records() == [10, 20]
