"""A stream is its first caller's: a real collector (gRPC on 127.0.0.1) against a client
that learnt a live stream's id, as issue 23's hijack did, and the agent's own reconnect.

- a second live hello with the id and no (or another) secret: ALREADY_EXISTS, and the
  stream's own call goes on; after it ended, PERMISSION_DENIED; nothing stored either way;
- the stream's own agent reconnecting with its secret takes over at once: the old call
  ends ABORTED and the log is closed (no flock held) after the new call's goodbye;
- a batch whose seq jumps by more than the bounded step is refused OUT_OF_RANGE and the
  stream's later batches are stored, not swallowed as duplicates;
- the secret is never stored, the argv of a raw client is redacted, capture replies
  name no stream id, and a batch that decodes past --max-inflight-bytes is refused.
"""

from __future__ import annotations

import time
from pathlib import Path

import grpc
import pytest

from tests.unit.agent_messages import batch, goodbye, hello, rejected, run_stream
from tests.unit.raw_stream import RawStream
from tfprof.collector.service.server import CollectorServer
from tfprof.collector.store.files import is_streaming
from tfprof.collector.store.writer import MAX_SEQ_STEP
from tfprof.proto import collector_pb2 as pb
from tfprof.proto import collector_pb2_grpc as pb_grpc

pytestmark = pytest.mark.timeout(60)
VICTIM_SECRET = b"v" * 32


def victim_hello(secret: bytes = VICTIM_SECRET, argv: list[str] | None = None) -> pb.AgentMessage:
    message = hello(stream_id="victim-stream")
    message.hello.stream_secret = secret
    message.hello.argv[:] = argv or []
    return message


def stream_dir(collector: CollectorServer) -> Path:
    return collector.store.jobs_dir / "train" / "run1" / "victim-stream"


def stored_starts(collector: CollectorServer) -> list[int]:
    (job,) = collector.store.load_jobs()
    return sorted(int(v) for s in job.streams for v in s.records["start_ns"].tolist())


def test_a_hello_with_a_live_streams_id_is_refused_without_its_secret(
    collector: CollectorServer, stub: pb_grpc.CollectorStub
) -> None:
    victim = RawStream(stub)
    victim.send(victim_hello())
    assert victim.next_ack().seq == 0
    victim.send(batch(1, [10, 11]))
    assert victim.next_ack().seq == 1
    for secret in (b"", b"x" * 32):  # none (an old client), or a guess
        err = rejected(stub, [victim_hello(secret), batch(10**18, [99])])
        expected = grpc.StatusCode.ALREADY_EXISTS if secret else grpc.StatusCode.INVALID_ARGUMENT
        assert err.code() == expected, err.details()
    # The victim's own call goes on, its later batches stored.
    victim.send(batch(2, [12]))
    assert victim.next_ack().seq == 2
    victim.send(goodbye(3))
    victim.close()
    assert stored_starts(collector) == [10, 11, 12]
    # Ended, the stream stays its agent's: a hello without the secret is refused.
    err = rejected(stub, [victim_hello(b"y" * 32), batch(3, [99])])
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED
    assert stored_starts(collector) == [10, 11, 12]
    # Nothing of the secret is stored: a digest beside the log, the hello without it.
    kept = (stream_dir(collector) / "hello.pb").read_bytes()
    assert VICTIM_SECRET not in kept and pb.Hello.FromString(kept).stream_secret == b""
    assert VICTIM_SECRET not in (stream_dir(collector) / "secret.sha256").read_bytes()


def test_a_reconnect_with_the_secret_takes_over_and_the_old_call_lets_go(
    collector: CollectorServer, stub: pb_grpc.CollectorStub
) -> None:
    old = RawStream(stub)
    old.send(victim_hello())
    assert old.next_ack().seq == 0
    old.send(batch(1, [10]))
    assert old.next_ack().seq == 1
    # The agent reconnects while the old call is still open (its connection hangs).
    acks = run_stream(stub, [victim_hello(), batch(1, [10]), batch(2, [20]), goodbye(2)])
    assert acks == [1, 1, 2]  # resumes after seq 1; its replay of 1 is a duplicate
    err = old.error()
    assert err.code() == grpc.StatusCode.ABORTED
    assert "resumed on a newer call" in (err.details() or "")
    old.close()
    deadline = time.monotonic() + 10  # the old call's teardown, on the server's loop
    while is_streaming(stream_dir(collector)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not is_streaming(stream_dir(collector))
    assert collector.store.list_jobs()[0].state == "finished"
    assert stored_starts(collector) == [10, 20]


def test_a_seq_jump_is_refused_and_swallows_nothing(
    collector: CollectorServer, stub: pb_grpc.CollectorStub
) -> None:
    err = rejected(stub, [victim_hello(), batch(1, [10]), batch(2 + MAX_SEQ_STEP, [99])])
    assert err.code() == grpc.StatusCode.OUT_OF_RANGE
    assert f"a jump of more than {MAX_SEQ_STEP}" in (err.details() or "")
    # The stream's next real batch is stored, not taken for a duplicate.
    acks = run_stream(stub, [victim_hello(), batch(2, [20]), goodbye(2)])
    assert acks == [1, 2]
    assert stored_starts(collector) == [10, 20]


def test_a_raw_clients_argv_is_stored_redacted(
    collector: CollectorServer, stub: pb_grpc.CollectorStub
) -> None:
    argv = ["train.py", "--api-key=SECRET123", "--token", "tok", "--lr=0.1"]
    run_stream(stub, [victim_hello(argv=argv), goodbye(0)])
    kept = pb.Hello.FromString((stream_dir(collector) / "hello.pb").read_bytes())
    assert list(kept.argv) == ["train.py", "--api-key=***", "--token", "***", "--lr=0.1"]


def test_capture_replies_and_the_capture_log_name_no_stream_id(
    collector: CollectorServer, stub: pb_grpc.CollectorStub
) -> None:
    victim = RawStream(stub)
    victim.send(victim_hello())
    assert victim.next_ack().seq == 0
    reply = stub.StartCapture(pb.CaptureRequest(all=True, duration_ns=10**6), timeout=10)
    (named,) = reply.capture.streams
    assert (named.job, named.run_id) == ("train", "run1")
    assert "victim-stream" not in str(reply)
    listed = stub.ListCaptures(pb.ListCapturesRequest(), timeout=10)
    assert "victim-stream" not in str(listed)
    assert "victim-stream" not in (collector.store.root / "captures.jsonl").read_text()
    victim.send(goodbye(0))
    victim.close()


def test_a_batch_that_decodes_past_the_inflight_limit_is_refused(tmp_path: Path) -> None:
    server = CollectorServer(
        "127.0.0.1:0", str(tmp_path / "data"), max_inflight_bytes=1 << 20
    ).start()
    try:
        big = pb.Batch(seq=1)
        big.records.kind.extend([pb.KERNEL] * 5000)  # 5 KB on the wire, 1.2 MB decoded
        big.records.start_ns.extend(range(1, 5001))
        with grpc.insecure_channel(server.address) as channel:
            stub = pb_grpc.CollectorStub(channel)
            err = rejected(stub, [victim_hello(), pb.AgentMessage(batch=big)])
            assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "--max-inflight-bytes" in (err.details() or "")
            assert run_stream(stub, [victim_hello(), batch(1, [10]), goodbye(1)]) == [0, 1]
    finally:
        server.stop(grace=1.0)
