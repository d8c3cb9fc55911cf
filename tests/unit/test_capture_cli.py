"""``tfprof-collector capture`` and ``captures`` against a real in-process collector with
raw agent streams: the window's merged timeline, listing, and one-line errors."""

from __future__ import annotations

import gzip
import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from tests.unit.agent_messages import batch, goodbye
from tests.unit.fleet_hello import hello
from tests.unit.raw_stream import RawStream
from tfprof.collector.cli import main
from tfprof.collector.service.server import CollectorServer
from tfprof.proto import collector_pb2_grpc as pb_grpc

pytestmark = pytest.mark.timeout(60)
MS = 10**6
TOKEN = "cli-token-7"


@pytest.fixture(autouse=True)
def own_log_handlers(capsys: pytest.CaptureFixture[str]) -> Iterator[None]:
    """main() adds a stderr handler to the tfprof logger; capsys closes that stream."""
    logger = logging.getLogger("tfprof")
    before = list(logger.handlers)
    yield
    logger.handlers[:] = before


@pytest.fixture
def two_jobs(collector: CollectorServer) -> Iterator[tuple[CollectorServer, int]]:
    """Streams of jobs train (two hosts) and eval, each with records 1 s from now (inside
    a window of 3 s that opens now; setting the streams up on a loaded machine with
    fsync on took over 300 ms) and 30 s from now (outside it)."""
    now = time.time_ns()
    with grpc.insecure_channel(collector.address) as ch:
        streams = []
        for job, host, pid in [("train", "node-a", 1), ("train", "node-b", 2), ("eval", "x", 3)]:
            s = RawStream(pb_grpc.CollectorStub(ch))
            s.send(hello(job, host, pid))
            assert s.next_ack().seq == 0
            s.send(batch(1, [now + 1_000 * MS + pid, now + 30_000 * MS], ["k"]))
            assert s.next_ack().seq == 1
            streams.append(s)
        try:
            yield collector, now
        finally:
            for s in streams:
                s.send(goodbye(2))
                s.close()


def trace_tasks(path: Path) -> list[str]:
    """The /job:J/task:T of every slice in a Chrome trace."""
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    return sorted("/".join(names[e["pid"]].split("/")[1:3]) for e in events if e.get("ph") == "X")


def test_capture_writes_the_windows_timeline_of_the_matching_ranks(
    two_jobs: tuple[CollectorServer, int], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    collector, _ = two_jobs
    out = tmp_path / "window.json.gz"
    code = main(["capture", "--collector", collector.address, "--job", "train",
                 "--duration", "3s", "--start-in", "0", "--flush-grace", "0ms",
                 "-o", str(out), "--data-dir", str(collector.store.root)])  # fmt: skip
    assert code == 0
    printed = capsys.readouterr().out
    assert "2 stream(s)" in printed and "node-a" in printed and "node-b" in printed
    # One slice per train rank: the records 30 s later and job eval are left out.
    assert trace_tasks(out) == ["job:train/task:1", "job:train/task:2"]


def test_captures_lists_from_the_collector_and_from_the_data_dir(
    two_jobs: tuple[CollectorServer, int], capsys: pytest.CaptureFixture[str]
) -> None:
    collector, _ = two_jobs
    assert main(["capture", "--collector", collector.address, "--host", "x",
                 "--duration", "500ms"]) == 0  # fmt: skip
    capture_id = capsys.readouterr().out.split()[1].rstrip(":")
    assert main(["captures", "--collector", collector.address, "--format", "json"]) == 0
    (listed,) = json.loads(capsys.readouterr().out)
    assert listed["capture_id"] == capture_id
    assert listed["hosts"] == ["x"] and listed["duration_ns"] == 500 * MS
    assert [s["job"] for s in listed["streams"]] == ["eval"]
    assert main(["captures", "--data-dir", str(collector.store.root)]) == 0
    table = capsys.readouterr().out
    assert capture_id in table and "host x" in table


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["--job", "nobody", "--duration", "1s"], 2, "capture: no live stream matches job"),
        (["--duration", "1s"], 2, "--job NAME, --host HOST, or --all"),
        (["--all", "--job", "a", "--duration", "1s"], 2, "without --job or --host"),
        (["--all", "--duration", "2"], 2, "--duration '2': not a duration"),
        (["--all", "--duration", "1s", "-o", "x.unknown"], 2, "cannot tell the output format"),
    ],
)
def test_capture_errors_are_one_line(
    two_jobs: tuple[CollectorServer, int],
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    code: int,
    message: str,
) -> None:
    collector, _ = two_jobs
    assert main(["capture", "--collector", collector.address, *argv]) == code
    # (The in-process collector logs its side of a refusal to the same stderr.)
    err = [line for line in capsys.readouterr().err.splitlines() if "rejected call" not in line]
    assert len(err) == 1 and err[0].startswith("tfprof-collector: ")
    assert message in err[0]


def test_capture_without_a_collector_fails_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["capture", "--collector", "127.0.0.1:1", "--all", "--duration", "1s"]) == 1
    assert "no collector answers at 127.0.0.1:1" in capsys.readouterr().err


def test_capture_needs_the_token_when_the_collector_has_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = CollectorServer("127.0.0.1:0", str(tmp_path / "data"), auth_token=TOKEN).start()
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    try:
        with grpc.insecure_channel(server.address) as ch:
            s = RawStream(pb_grpc.CollectorStub(ch), (("authorization", f"Bearer {TOKEN}"),))
            s.send(hello("train", "node-a", 1))
            assert s.next_ack().seq == 0
            argv = ["capture", "--collector", server.address, "--all", "--duration", "1s"]
            assert main(argv) == 2
            assert "refused" in capsys.readouterr().err
            assert main([*argv, "--auth-token-file", str(token_file)]) == 0
            assert [w.capture_id for w in s.next_ack().captures]
            s.send(goodbye(0))
            s.close()
    finally:
        server.stop(grace=1.0)
