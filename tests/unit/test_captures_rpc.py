"""StartCapture / ListCaptures on a real collector with raw agent streams: the window goes
down every matching stream's response (by job, by host, all), late joiners get an open
window, captures need the token when one is set, and the record survives a restart."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from tests.unit.agent_messages import batch, goodbye
from tests.unit.fleet_hello import hello
from tests.unit.raw_stream import RawStream
from tfprof.collector.service.server import CollectorServer
from tfprof.collector.store.capture_log import CAPTURES_FILE
from tfprof.proto import collector_pb2 as pb
from tfprof.proto import collector_pb2_grpc as pb_grpc

pytestmark = pytest.mark.timeout(60)
TOKEN = "cap-token-1"
SECOND = 10**9


class Fleet:
    """Raw streams that said hello: (job, host, pid) -> stream."""

    def __init__(self, stub: pb_grpc.CollectorStub, metadata: tuple[tuple[str, str], ...] = ()):
        self.stub = stub
        self.metadata = metadata
        self.streams: dict[tuple[str, str, int], RawStream] = {}

    def join(self, job: str, host: str, pid: int) -> RawStream:
        s = RawStream(self.stub, self.metadata)
        s.send(hello(job, host, pid))
        assert s.next_ack().seq == 0
        self.streams[(job, host, pid)] = s
        return s

    def windows(self, wait: float = 0.5) -> dict[tuple[str, str, int], list[str]]:
        """Capture ids each stream received within ``wait`` seconds."""
        time.sleep(wait)
        got: dict[tuple[str, str, int], list[str]] = {}
        for key, s in self.streams.items():
            ids: list[str] = []
            while not s.acks.empty():
                ack = s.next_ack()
                assert ack.seq == 0  # a push carries no new sequence
                ids.extend(w.capture_id for w in ack.captures)
            got[key] = ids
        return got

    def close(self) -> None:
        for s in self.streams.values():
            s.send(goodbye(0))
            s.close()


@pytest.fixture
def fleet(collector: CollectorServer) -> Iterator[Fleet]:
    with grpc.insecure_channel(collector.address) as ch:
        f = Fleet(pb_grpc.CollectorStub(ch))
        f.join("train", "node-a", 1)
        f.join("train", "node-b", 2)
        f.join("eval", "node-a", 3)
        try:
            yield f
        finally:
            f.close()


def start(stub: pb_grpc.CollectorStub, **fields: object) -> pb.Capture:
    request = pb.CaptureRequest(duration_ns=2 * SECOND, start_in_ns=SECOND // 2)
    for key, value in fields.items():
        if isinstance(value, list):
            getattr(request, key).extend(value)
        else:
            setattr(request, key, value)
    return stub.StartCapture(request, timeout=10).capture


def test_a_capture_by_job_reaches_only_that_jobs_streams(fleet: Fleet) -> None:
    before = time.time_ns()
    capture = start(fleet.stub, jobs=["train"])
    assert capture.capture_id.startswith("cap-")
    assert before <= capture.requested_ns <= time.time_ns()
    assert capture.start_ns == capture.requested_ns + SECOND // 2
    assert capture.duration_ns == 2 * SECOND
    assert sorted((s.job, s.host, s.pid, s.task) for s in capture.streams) == [
        ("train", "node-a", 1, "1"), ("train", "node-b", 2, "2")]  # fmt: skip
    got = fleet.windows()
    assert got == {
        ("train", "node-a", 1): [capture.capture_id],
        ("train", "node-b", 2): [capture.capture_id],
        ("eval", "node-a", 3): [],
    }


def test_captures_by_host_and_all(fleet: Fleet) -> None:
    by_host = start(fleet.stub, hosts=["node-a"])
    both = start(fleet.stub, jobs=["train"], hosts=["node-b"])
    every = start(fleet.stub, all=True)
    got = fleet.windows()
    assert got[("train", "node-a", 1)] == [by_host.capture_id, every.capture_id]
    assert got[("train", "node-b", 2)] == [both.capture_id, every.capture_id]
    assert got[("eval", "node-a", 3)] == [by_host.capture_id, every.capture_id]
    # Batches still flow and are acknowledged on the same response stream.
    s = fleet.streams[("eval", "node-a", 3)]
    s.send(batch(1, [10]))
    assert s.next_ack().seq == 1


def test_a_stream_that_joins_during_an_open_window_gets_it(fleet: Fleet) -> None:
    capture = start(fleet.stub, jobs=["train"])
    late = fleet.join("train", "node-c", 9)  # a rank that starts after the request
    ack = late.next_ack(timeout=5)
    assert [w.capture_id for w in ack.captures] == [capture.capture_id]
    assert ack.captures[0].start_ns == capture.start_ns


@pytest.mark.parametrize(
    ("fields", "code", "detail"),
    [
        ({"jobs": ["nobody"], "start_in_ns": 0}, grpc.StatusCode.NOT_FOUND, "no live stream"),
        ({}, grpc.StatusCode.INVALID_ARGUMENT, "jobs, hosts, or all"),
        ({"all": True, "jobs": ["train"]}, grpc.StatusCode.INVALID_ARGUMENT, "no job or host"),
        ({"all": True, "duration_ns": 0}, grpc.StatusCode.INVALID_ARGUMENT, "duration"),
        ({"all": True, "start_in_ns": -1}, grpc.StatusCode.INVALID_ARGUMENT, "start-in"),
    ],
)
def test_bad_capture_requests_get_a_precise_status(
    fleet: Fleet, fields: dict[str, object], code: grpc.StatusCode, detail: str
) -> None:
    with pytest.raises(grpc.RpcError) as info:
        start(fleet.stub, **fields)
    assert info.value.code() == code
    assert detail in (info.value.details() or "")


def test_captures_are_listed_after_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = CollectorServer("127.0.0.1:0", str(data)).start()
    try:
        with grpc.insecure_channel(server.address) as ch:
            fleet = Fleet(pb_grpc.CollectorStub(ch))
            fleet.join("train", "node-a", 1)
            first = start(fleet.stub, all=True, duration_ns=60 * SECOND)
            fleet.close()
    finally:
        server.stop(grace=1.0)
    assert (data / CAPTURES_FILE).is_file()
    with open(data / CAPTURES_FILE, "a") as f:
        f.write('{"capture_id": "torn')  # a crash mid-append: skipped, not fatal
    again = CollectorServer("127.0.0.1:0", str(data)).start()
    try:
        with grpc.insecure_channel(again.address) as ch:
            stub = pb_grpc.CollectorStub(ch)
            (listed,) = stub.ListCaptures(pb.ListCapturesRequest(), timeout=10).captures
            assert listed == first
            # Its window is still open: a stream reconnecting to the new server gets it.
            fleet = Fleet(stub)
            s = fleet.join("train", "node-a", 1)
            assert [w.capture_id for w in s.next_ack(timeout=5).captures] == [first.capture_id]
            fleet.close()
    finally:
        again.stop(grace=1.0)


def test_with_a_token_only_authenticated_callers_capture(tmp_path: Path) -> None:
    server = CollectorServer("127.0.0.1:0", str(tmp_path / "data"), auth_token=TOKEN).start()
    good = (("authorization", f"Bearer {TOKEN}"),)
    try:
        with grpc.insecure_channel(server.address) as ch:
            stub = pb_grpc.CollectorStub(ch)
            fleet = Fleet(stub, good)
            fleet.join("train", "node-a", 1)
            request = pb.CaptureRequest(all=True, duration_ns=SECOND)
            for metadata in [(), (("authorization", "Bearer nope"),)]:
                with pytest.raises(grpc.RpcError) as info:
                    stub.StartCapture(request, metadata=metadata, timeout=10)
                assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert fleet.windows() == {("train", "node-a", 1): []}
            capture = stub.StartCapture(request, metadata=good, timeout=10).capture
            assert fleet.windows() == {("train", "node-a", 1): [capture.capture_id]}
            fleet.close()
    finally:
        server.stop(grace=1.0)
    assert (tmp_path / "data" / CAPTURES_FILE).read_text().count("\n") == 1
