"""``export --collector`` and the Export call: a real in-process collector writes the trace
in a child process and streams it; the client, in a directory of its own, never reads the
data dir. The trace is the one ``export --data-dir`` writes."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import psutil
import pytest

from tests.unit.agent_messages import batch, goodbye
from tests.unit.fleet_hello import hello
from tests.unit.raw_stream import RawStream
from tfprof.collector.cli import main
from tfprof.collector.service import servicer as servicer_module
from tfprof.collector.service.export_stream import CHILD, CHUNK_BYTES
from tfprof.collector.service.server import CollectorServer
from tfprof.proto import collector_pb2 as pb
from tfprof.proto import collector_pb2_grpc as pb_grpc

pytestmark = pytest.mark.timeout(120)
MS = 10**6
TOKEN = "export-token-3"


@pytest.fixture(autouse=True)
def own_log_handlers() -> Iterator[None]:
    """main() adds a stderr handler to the tfprof logger (when it has none); capsys closes
    that stream after each test."""
    logger = logging.getLogger("tfprof")
    before = list(logger.handlers)
    logger.handlers[:] = []  # one an earlier test left may write to a closed capture
    yield
    logger.handlers[:] = before


def store(server: CollectorServer, streams: list[tuple[str, str, int]], records: int = 2) -> None:
    """Finished streams of (job, host, pid), ``records`` kernels each."""
    now = time.time_ns()
    with grpc.insecure_channel(server.address) as ch:
        for job, host, pid in streams:
            s = RawStream(pb_grpc.CollectorStub(ch), ((("authorization", f"Bearer {TOKEN}"),)))
            s.send(hello(job, host, pid))
            s.next_ack()
            s.send(batch(1, [now + i * 1000 + pid for i in range(records)], ["kernel"]))
            s.next_ack()
            s.send(goodbye(records))
            s.close()


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The client's own working directory, away from the collector's data dir."""
    where = tmp_path / "laptop"
    where.mkdir()
    monkeypatch.chdir(where)
    return where


def events(path: Path) -> list[dict[str, object]]:
    doc = json.loads(path.read_text())
    return [e for e in doc["traceEvents"] if e.get("ph") != "M" or e.get("name") != "clock_sync"]


def test_the_remote_trace_is_the_local_one(
    collector: CollectorServer, elsewhere: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store(collector, [("train", "node-a", 1), ("train", "node-b", 2), ("eval", "x", 3)])
    assert main(["export", "--collector", collector.address, "--job", "train",
                 "-o", "remote.json"]) == 0  # fmt: skip
    assert "wrote remote.json: 4 slices" in capsys.readouterr().err
    local = elsewhere.parent / "local.json"
    assert main(["export", "--data-dir", str(collector.store.root), "--job", "train",
                 "-o", str(local)]) == 0  # fmt: skip
    assert events(elsewhere / "remote.json") == events(local)
    assert sorted(p.name for p in elsewhere.iterdir()) == ["remote.json"]  # no partial left


@pytest.mark.parametrize(
    ("output", "where"),
    [
        ("t.json.gz", "t.json.gz"),
        ("t.pftrace", "t.pftrace"),
        ("t.pbtxt", "t.pbtxt"),
        ("logs/", "logs/plugins/profile/*/node-a.xplane.pb"),
    ],
)
def test_every_format_arrives_where_a_local_export_puts_it(
    collector: CollectorServer, elsewhere: Path, output: str, where: str
) -> None:
    store(collector, [("train", "node-a", 1)])
    fmt = ["--format", "xplane"] if output.endswith("/") else []
    assert main(["export", "--collector", collector.address, "-o", output, *fmt]) == 0
    (found,) = elsewhere.glob(where)
    assert found.stat().st_size > 0
    if output.endswith(".gz"):
        assert found.read_bytes()[:2] == b"\x1f\x8b"
    if output.endswith(".pbtxt"):
        assert "step_stats" in found.read_text()


def test_a_trace_of_many_chunks_arrives_whole(collector: CollectorServer, elsewhere: Path) -> None:
    store(collector, [("big", "node-a", 1)], records=20_000)
    assert main(["export", "--collector", collector.address, "-o", "big.json"]) == 0
    out = elsewhere / "big.json"
    assert out.stat().st_size > 3 * CHUNK_BYTES
    slices = [e for e in json.loads(out.read_text())["traceEvents"] if e.get("ph") == "X"]
    assert len(slices) == 20_000


def test_errors_are_one_line_and_leave_no_file(
    collector: CollectorServer, elsewhere: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store(collector, [("train", "node-a", 1)])
    assert main(["export", "--collector", collector.address, "--job", "nosuch",
                 "-o", "x.json"]) == 2  # fmt: skip
    assert main(["export", "--collector", collector.address, "--capture", "cap-none",
                 "-o", "x.json"]) == 2  # fmt: skip
    assert main(["export", "--collector", collector.address, "--window", "oops",
                 "-o", "x.json"]) == 2  # fmt: skip
    # (The in-process collector logs its side of each refusal to the same stderr.)
    err = [
        ln
        for ln in capsys.readouterr().err.splitlines()
        if ln.startswith("tfprof-collector: ") and "rejected call" not in ln
    ]
    assert len(err) == 3
    assert "no such job" in err[0] and "no capture cap-none" in err[1] and "oops" in err[2]
    assert list(elsewhere.iterdir()) == []


def test_the_token_guards_exports(tmp_path: Path, elsewhere: Path) -> None:
    server = CollectorServer("127.0.0.1:0", str(tmp_path / "data"), auth_token=TOKEN).start()
    try:
        store(server, [("train", "node-a", 1)])
        assert main(["export", "--collector", server.address, "-o", "x.json"]) == 2
        assert not (elsewhere / "x.json").exists()
        token = tmp_path / "token"
        token.write_text(TOKEN + "\n")
        assert main(["export", "--collector", server.address, "--auth-token-file", str(token),
                     "-o", "x.json"]) == 0  # fmt: skip
        assert (elsewhere / "x.json").exists()
    finally:
        server.stop(grace=1.0)


def export_children() -> list[psutil.Process]:
    me = psutil.Process()
    return [p for p in me.children() if CHILD in " ".join(p.cmdline())]


def test_a_caller_that_goes_away_stops_the_export_child(
    collector: CollectorServer, stub: pb_grpc.CollectorStub
) -> None:
    store(collector, [("big", "node-a", 1)], records=20_000)
    call = stub.Export(pb.ExportRequest(format="chrome", file_name="t.json"), timeout=60)
    first = next(iter(call))
    assert first.HasField("data")
    call.cancel()  # type: ignore[no-untyped-call]  # grpc-stubs leaves it untyped
    deadline = time.monotonic() + 30
    while (collector.servicer.exports or export_children()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert collector.servicer.exports == 0
    assert export_children() == []


def test_a_collector_busy_with_exports_says_so(
    collector: CollectorServer, stub: pb_grpc.CollectorStub
) -> None:
    collector.servicer.exports = servicer_module.MAX_EXPORTS  # as if that many were running
    try:
        with pytest.raises(grpc.RpcError) as busy:
            list(stub.Export(pb.ExportRequest(format="chrome"), timeout=30))
    finally:
        collector.servicer.exports = 0
    assert busy.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert export_children() == []


def test_a_bad_request_is_refused_before_any_child_starts(
    collector: CollectorServer, stub: pb_grpc.CollectorStub
) -> None:
    for request in (
        pb.ExportRequest(format="svg"),
        pb.ExportRequest(format="chrome", group_by="host"),
        pb.ExportRequest(format="chrome", capture_id="c", window="+1s:+2s"),
    ):
        with pytest.raises(grpc.RpcError) as bad:
            list(stub.Export(request, timeout=30))
        assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_capture_o_without_the_data_dir_gets_the_trace_from_the_collector(
    collector: CollectorServer, elsewhere: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    now = time.time_ns()
    with grpc.insecure_channel(collector.address) as ch:
        s = RawStream(pb_grpc.CollectorStub(ch))
        s.send(hello("train", "node-a", 1))
        s.next_ack()
        s.send(batch(1, [now + 1_000 * MS, now + 30_000 * MS], ["kernel"]))
        s.next_ack()
        try:
            assert main(["capture", "--collector", collector.address, "--job", "train",
                         "--duration", "3s", "--start-in", "0", "--flush-grace", "0ms",
                         "-o", "window.json"]) == 0  # fmt: skip
        finally:
            s.send(goodbye(2))
            s.close()
    assert "wrote window.json: 1 slices" in capsys.readouterr().err
    assert os.listdir(elsewhere) == ["window.json"]
